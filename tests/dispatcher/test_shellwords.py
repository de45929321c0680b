"""The one tokenizer (parkgate.rules.shellwords): commands as /bin/sh reads them.

Each reading is checked against the real /bin/sh where it matters: the words
the tokenizer reports are the words sh passes to the program.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parkgate.rules.remember_spec import RememberSpec
from parkgate.rules.remembered import (
    RememberError,
    check_remember,
    matching_rule,
    prefix_matches,
    rule_for,
)
from parkgate.rules.shellwords import parse, words_of


@pytest.mark.parametrize(("line", "words"), [
    ("git status", ("git", "status")),
    ("  git\tstatus  ", ("git", "status")),
    ("'git' \"status\"", ("git", "status")),
    ("g\\it st'at'us", ("git", "status")),
    ("echo 'a b' \"c\\\"d\" e\\ f", ("echo", "a b", 'c"d', "e f")),
    ("echo \"\\$HOME\" '$HOME'", ("echo", "$HOME", "$HOME")),
    ("echo a\\\nb", ("echo", "ab")),  # line continuation
    ("echo a\u00a0b", ("echo", "a\u00a0b")),  # no-break space is not a blank to sh
])
def test_words_are_what_sh_passes(tmp_path: Path, line: str, words: tuple[str, ...]) -> None:
    assert words_of(line) == words
    # /bin/sh agrees: print each argument on its own line, NUL-separated.
    probe = line.replace(words[0], "printf '%s\\0'", 1) if words[0] == "echo" else None
    if probe is not None:
        out = subprocess.run(["/bin/sh", "-c", probe], capture_output=True, check=True,
                             cwd=tmp_path).stdout.decode()
        assert tuple(out.split("\0")[:-1]) == words[1:]


def test_carriage_return_is_a_word_character_as_in_sh(tmp_path: Path) -> None:
    (tmp_path / "uname\r-a\r").mkdir()
    line = "uname\r-a\r/../../../../../../../../bin/echo hi"
    parsed = parse(line)
    assert len(parsed.commands) == 1 and parsed.commands[0].name == "echo"
    assert "control character" in parsed.reasons
    ran = subprocess.run(["/bin/sh", "-c", line], capture_output=True, cwd=tmp_path)
    assert ran.stdout == b"hi\n"  # sh ran echo through the directory, not `uname -a`


@pytest.mark.parametrize(("line", "names"), [
    ("ls && rm -rf x", ["ls", "rm"]),
    ("a; b || c | d & e\nf", list("abcdef")),
    ("(cd x; make)", ["cd", "make"]),
    ("{ ls; }", ["ls"]),
    ("! kubectl get", ["kubectl"]),
    ("env -u X FOO=1 nice -n 5 timeout -s KILL 5 kubectl get", ["kubectl"]),
    ("command -p exec /usr/bin/kubectl get", ["kubectl"]),
    ("command -v rm", ["command"]),
    ("nice", ["nice"]),
])
def test_commands_and_wrappers(line: str, names: list[str]) -> None:
    parsed = parse(line)
    assert parsed.certain, parsed.reasons
    assert [c.name for c in parsed.top] == names


@pytest.mark.parametrize(("line", "reason", "nested"), [
    ("echo $(rm -rf x)", "command substitution", ["rm"]),
    ("echo `rm -rf x`", "command substitution", ["rm"]),
    ("echo \"$(rm x)\"", "command substitution", ["rm"]),
    ("echo ${A:-$(rm x)}", "parameter expansion", ["rm"]),
    ("sh -c 'rm -rf x'", None, ["rm"]),
    ("bash -lc 'rm -rf x'", None, ["rm"]),
    ("eval rm -rf x", None, ["rm"]),
    ("env -S 'rm -rf x'", "env -S", ["rm"]),
    ("nice -10 rm -rf x", "unknown option of nice: -10", ["rm"]),
    ("echo x > f", "redirection", []),
    ("cat <(rm x)", "process substitution", []),
    ("echo 'open", "unbalanced single quote", []),
    ("git status)", "unbalanced parenthesis", []),
    ("f() { rm x; }", "function definition or misplaced parenthesis", []),
    ("echo *", "pathname pattern", []),
    ("echo $HOME", "parameter expansion", []),
    ("ls # x", "comment", []),
    ("if true; then rm x; fi", "compound command (if)", []),
    ("echo a\rb", "control character", []),
])
def test_uncertain_lines_say_why_and_keep_what_strict_rules_need(
    line: str, reason: str | None, nested: list[str],
) -> None:
    parsed = parse(line)
    if reason is None:
        assert parsed.certain
    else:
        assert reason in parsed.reasons, parsed.reasons
    inner = [c.name for c in parsed.commands if c.nested]
    for name in nested:
        assert name in inner or name in [c.name for c in parsed.commands], (line, parsed)


@pytest.mark.parametrize(("line", "ok"), [
    ("uname -a", True),
    ("env uname -a", True),
    ("'uname' \"-a\"", True),
    ("uname\r-a\r/../../../../usr/bin/python3 -c 'print(1)'", False),
    ("uname -a\r", False),
    ("/usr/bin/uname -a", False),
    ("./uname -a", False),
    ("PATH=. uname -a", False),
    ("env -i uname -a", False),
    ("./env uname -a", False),
    ("uname -a $(id)", False),
    ("uname -a; id", False),
])
def test_remembered_prefix_reads_like_sh(line: str, ok: bool) -> None:
    assert prefix_matches(line, "uname -a") is ok


def test_remembered_uname_never_allows_the_carriage_return_directory() -> None:
    t0 = datetime(2026, 11, 26, tzinfo=UTC)
    spec = RememberSpec(scope="session", ttl_seconds=600)
    rule = rule_for(spec, request_id="r", project="default", session_id="s",
                    workspace_path="/w", tool_name="shell", tool_input={"command": "uname -a"},
                    decided_at=t0, created_by="alice", principal_id="key:a", approver=None)
    base = {"session_id": "s", "workspace_path": "/w", "tool_name": "shell", "now": t0}
    assert matching_rule([rule], **base, tool_input={"command": "uname -a"}) is rule
    sneaky = {"command": "uname\r-a\r/../../../../usr/bin/python3 -c 'import os'"}
    assert matching_rule([rule], **base, tool_input=sneaky) is None
    with pytest.raises(RememberError):
        rule_for(spec, request_id="r2", project="default", session_id="s", workspace_path="/w",
                 tool_name="shell", tool_input=sneaky, decided_at=t0, created_by="alice",
                 principal_id="key:a", approver=None)
    odd = RememberSpec(scope="session", ttl_seconds=600, command_prefix="uname\r-a")
    assert check_remember(odd, {"command": "uname\r-a"}) is not None
    assert check_remember(spec, {"command": "uname -a"}) is None


# ------------------------------------------------- differential: ask /bin/sh

TEXT = st.text(
    alphabet=st.sampled_from([*"ab -\t'\"\\$`*?~#;&|()<>{}=/.\r\x1b", "\u00a0", "é"]),
    max_size=24,
)


@settings(max_examples=300, deadline=None)
@given(rest=TEXT)
def test_certain_lines_read_as_sh_reads_them(tmp_path_factory: Any, rest: str) -> None:
    """Whenever the tokenizer calls a one-command line certain, /bin/sh passes
    exactly the words it read (printf shows sh's argv). Never raises."""
    line = "printf '%s\\0' " + rest
    parsed = parse(line)
    assert isinstance(parsed.reasons, tuple)
    if not parsed.certain or len(parsed.commands) != 1 or parsed.commands[0].raw != line.strip():
        return
    cwd = tmp_path_factory.mktemp("sh")
    ran = subprocess.run(["/bin/sh", "-c", line], capture_output=True, cwd=cwd, timeout=10)
    assert ran.returncode == 0, (line, ran.stderr)
    args = ran.stdout.decode().split("\0")[:-1] if ran.stdout else []
    words = parsed.commands[0].args[1:] if parsed.commands[0].args else ()
    expected = list(words) or ([""] if not words else [])
    assert args == expected, (line, args, parsed.commands[0])


@pytest.mark.parametrize(("line", "name", "reason"), [
    ("env -- A=1 rm -rf x", "rm", None),
    ("bash -o pipefail -c 'rm x'", "bash", None),
    ("echo {a,b}", "echo", "brace expansion"),
    ("find . -exec grep x {} +", "find", None),
    ("ls ~", "ls", "tilde expansion"),
])
def test_more_readings(line: str, name: str, reason: str | None) -> None:
    parsed = parse(line)
    assert parsed.top[0].name == name
    assert (reason in parsed.reasons) if reason else parsed.certain, parsed.reasons


@pytest.mark.parametrize("opener", ["${", "$(", "\"$(", "`", "(", "sh -c \"", "$((", "'"])
def test_deep_nesting_never_exhausts_the_stack(opener: str) -> None:
    parsed = parse(opener * 1000)  # the shell guard caps commands far below this
    assert isinstance(parsed.reasons, tuple)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from([*"${(`\"')}; \\|&<>#~*\t\nab=-", "\r"]),
                    max_size=400))
def test_any_text_reads_without_raising(text: str) -> None:
    parsed = parse(text)
    for command in parsed.commands:
        assert isinstance(command.text, str) and isinstance(command.written_text, str)
