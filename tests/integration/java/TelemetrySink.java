// A KIP-714 telemetry exporter for the test broker (tests/integration/test_kafka_telemetry.py):
// every PushTelemetry payload the broker accepts is decoded with the broker's own OTLP classes
// and appended to the file named by the broker property aiokprod.telemetry.file, one line per
// data point: instance id, terminating, metric name, kind, value, attributes.

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporter;
import org.apache.kafka.server.telemetry.ClientTelemetryExporterProvider;
import org.apache.kafka.shaded.io.opentelemetry.proto.common.v1.KeyValue;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.Metric;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.MetricsData;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.NumberDataPoint;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ResourceMetrics;
import org.apache.kafka.shaded.io.opentelemetry.proto.metrics.v1.ScopeMetrics;

public class TelemetrySink implements MetricsReporter, ClientTelemetryExporterProvider {
    private volatile Path out;

    @Override
    public void configure(Map<String, ?> configs) {
        Object file = configs.get("aiokprod.telemetry.file");
        if (file != null) {
            out = Paths.get(file.toString());
        }
    }

    @Override public void init(List<KafkaMetric> metrics) { }
    @Override public void metricChange(KafkaMetric metric) { }
    @Override public void metricRemoval(KafkaMetric metric) { }
    @Override public void close() { }

    @Override
    public ClientTelemetryExporter clientTelemetryExporter() {
        return (context, payload) -> {
            StringBuilder lines = new StringBuilder();
            String head = payload.clientInstanceId() + "\t" + payload.isTerminating()
                + "\t" + context.pushIntervalMs();
            try {
                MetricsData data = MetricsData.parseFrom(payload.data());
                lines.append("push\t").append(head).append('\t').append(payload.contentType())
                    .append('\n');
                for (ResourceMetrics rm : data.getResourceMetricsList()) {
                    for (ScopeMetrics sm : rm.getScopeMetricsList()) {
                        for (Metric m : sm.getMetricsList()) {
                            boolean sum = m.hasSum();
                            List<NumberDataPoint> points = sum ? m.getSum().getDataPointsList()
                                : m.getGauge().getDataPointsList();
                            for (NumberDataPoint p : points) {
                                StringBuilder attrs = new StringBuilder();
                                for (KeyValue kv : p.getAttributesList()) {
                                    attrs.append(kv.getKey()).append('=')
                                        .append(kv.getValue().getStringValue()).append(',');
                                }
                                lines.append("point\t").append(head).append('\t')
                                    .append(m.getName()).append('\t')
                                    .append(sum ? "sum" : "gauge").append('\t')
                                    .append(p.getAsDouble()).append('\t').append(attrs)
                                    .append('\n');
                            }
                        }
                    }
                }
            } catch (Exception e) {
                lines.append("error\t").append(head).append('\t').append(e).append('\n');
            }
            write(lines.toString());
        };
    }

    private synchronized void write(String text) {
        Path file = out;
        if (file == null) {
            return;
        }
        try {
            Files.write(file, text.getBytes(StandardCharsets.UTF_8), StandardOpenOption.CREATE,
                StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }
}
