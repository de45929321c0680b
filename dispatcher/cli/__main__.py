"""`python -m parkgate.cli` == `parkgate` (works before the console script is installed)."""

from parkgate.cli import main

main()
