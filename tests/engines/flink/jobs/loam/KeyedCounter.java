package loam;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.util.ParameterTool;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * The test job of Loam's Flink tests: a rate-limited sequence (its position checkpointed)
 * keyed by n % 2 into a counter held in ValueState, printed as
 * "loam-counter tag=<tag> key=<k> count=<c> seq=<n>". A restored job continues count and seq.
 * --fail makes every element throw (an upgrade to a broken version); --stateless drops the
 * counter operator (its savepoint state then has nowhere to go).
 */
public class KeyedCounter {
  public static void main(String[] args) throws Exception {
    ParameterTool params = ParameterTool.fromArgs(args);
    String tag = params.get("tag", "v1");
    int rate = params.getInt("rate", 5);
    boolean fail = params.has("fail");
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    DataGeneratorSource<Long> source =
        new DataGeneratorSource<>(n -> n, Long.MAX_VALUE, RateLimiterStrategy.perSecond(rate), Types.LONG);
    DataStream<Long> seq =
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "seq").uid("seq-source").setParallelism(1);
    if (params.has("stateless")) {
      seq.map(n -> "loam-counter tag=" + tag + " stateless seq=" + n).returns(Types.STRING).uid("plain").print().uid("print-sink");
      env.execute("loam-counter-" + tag);
      return;
    }
    seq.keyBy(n -> n % 2)
        .process(new Counter(tag, fail))
        .uid("counter")
        .print()
        .uid("print-sink");
    env.execute("loam-counter-" + tag);
  }

  static class Counter extends KeyedProcessFunction<Long, Long, String> {
    private final String tag;
    private final boolean fail;
    private transient ValueState<Long> count;

    Counter(String tag, boolean fail) {
      this.tag = tag;
      this.fail = fail;
    }

    @Override
    public void open(OpenContext ctx) {
      count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
    }

    @Override
    public void processElement(Long n, Context ctx, Collector<String> out) throws Exception {
      if (fail) {
        throw new IllegalStateException("version " + tag + " is broken");
      }
      long c = count.value() == null ? 1 : count.value() + 1;
      count.update(c);
      out.collect("loam-counter tag=" + tag + " key=" + ctx.getCurrentKey() + " count=" + c + " seq=" + n);
    }
  }
}
