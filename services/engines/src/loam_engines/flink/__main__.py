"""`python -m loam_engines.flink ...`: the Flink CLI (cli.py)."""

from loam_engines.flink.cli import main

main()
