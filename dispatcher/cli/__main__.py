"""`python -m dispatcher.cli` == `parkgate` (works before the console script is installed)."""

from parkgate.cli import main

main()
