"""parkgate's benchmarks: `python -m bench` measures what durability costs, how
many calls can wait, and how fast history writes, in one run and one table."""
