"""Where a tool's child process runs: its environment, its user, what it sees.

`launch` spawns the process (allowlisted environment, on Linux a sandbox);
`plan` (the mount plan), `paths` (what parkgate owns on the host), `fstab`
(the plan as one fstab), `services` (host services' sockets the plan covers),
`tool_user` (the OS user tools run as), `toolenv`
(the environment allowlist).
"""
