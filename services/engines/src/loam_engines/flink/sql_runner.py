"""The Flink SQL runner: a PyFlink program the lifecycle submits like any PyFlink job
(PythonDriver `-py sql_runner.py --script <file>`), which runs a SQL script on Flink.

Statements are split at a `;` that ends a line, `--` comment lines dropped, and applied in
order: `SET 'k' = 'v'` sets the table config, every INSERT joins one statement set (one
job), anything else (CREATE TABLE/VIEW/FUNCTION, USE, ...) executes at once. Re-running a
script from a savepoint builds the same job again, which is how a suspended or upgraded SQL
deployment continues its counts (docs/decisions/0027). This file runs inside the Flink
JobManager with the engines venv's Python; it imports nothing from Loam.
"""

from __future__ import annotations

import re
import sys

_SET = re.compile(r"^SET\s+'([^']+)'\s*=\s*'([^']*)'$", re.IGNORECASE | re.DOTALL)


def split_statements(script: str) -> list[str]:
    statements, current = [], []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            text = "\n".join(current).strip().rstrip(";").strip()
            if text:
                statements.append(text)
            current = []
    tail = "\n".join(current).strip().rstrip(";").strip()
    if tail:
        statements.append(tail)
    return statements


def main(argv: list[str]) -> None:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    path = argv[argv.index("--script") + 1]
    with open(path) as f:
        statements = split_statements(f.read())
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    inserts = t_env.create_statement_set()
    n_inserts = 0
    for statement in statements:
        m = _SET.match(statement)
        if m:
            t_env.get_config().set(m.group(1), m.group(2))
        elif statement.upper().startswith(("INSERT", "EXECUTE INSERT")):
            inserts.add_insert_sql(statement)
            n_inserts += 1
        else:
            t_env.execute_sql(statement)
    if n_inserts == 0:
        raise SystemExit("the SQL script has no INSERT: nothing would run")
    inserts.execute()


if __name__ == "__main__":
    main(sys.argv)
