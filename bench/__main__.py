"""`python -m bench`: see bench/cli.py (or `python -m bench --help`)."""

from bench.cli import main

if __name__ == "__main__":
    main()
