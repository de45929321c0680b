"""`python -m dispatcher.cli` == `parkgate` (works before the console script is installed)."""

from dispatcher.cli import main

main()
