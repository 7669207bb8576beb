"""The `loam` command."""


def main() -> None:
    raise SystemExit("loam: not wired yet")
