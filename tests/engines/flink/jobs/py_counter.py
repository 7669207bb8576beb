"""The PyFlink test job: a datagen sequence keyed by id % 2 into a counter in ValueState,
printed as "loam-pycounter tag=<tag> key=<k> count=<c> id=<n>"; a restore continues both."""

import sys

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from pyflink.datastream.state import ValueStateDescriptor
from pyflink.table import StreamTableEnvironment


class Counter(KeyedProcessFunction):
    def __init__(self, tag: str) -> None:
        self.tag = tag

    def open(self, ctx: RuntimeContext) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield f"loam-pycounter tag={self.tag} key={ctx.get_current_key()} count={c} id={value[0]}"


def main(tag: str) -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql(
        "CREATE TABLE seq (id BIGINT) WITH ('connector' = 'datagen', 'rows-per-second' = '5', "
        "'fields.id.kind' = 'sequence', 'fields.id.start' = '1', 'fields.id.end' = '1000000')"
    )
    rows = t_env.to_data_stream(t_env.from_path("seq"))
    (
        rows.key_by(lambda r: r[0] % 2, key_type=Types.LONG())
        .process(Counter(tag), output_type=Types.STRING())
        .uid("py-counter")
        .print()
    )
    env.execute(f"loam-pycounter-{tag}")


if __name__ == "__main__":
    main(sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else "v1")
