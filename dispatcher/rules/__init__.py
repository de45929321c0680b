"""A call's rules: what policy, remembered decisions, hooks and budgets say about it.

The confirmation policy (`policy`), the one shell tokenizer every command rule
reads (`shellwords`), an approver's remembered "allow this again" (`remembered`,
`remember_spec`), before/after hooks (`hooks`), the in-process call cap (`budget`)
and named budgets that park at their limit (`budgets`).
Pure: over `parkgate.models` and `parkgate.verdicts` only.
"""
