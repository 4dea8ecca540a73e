// Prints org.apache.kafka.common.protocol.Errors of the kafka-clients jar on the class path as
// tools/kafka-specs/kafka-error-codes.tsv: code, name, the Java client's exception class,
// whether that client treats it as retriable, and its default message.
// Run by tools/vendor_kafka_specs.py (`java -cp kafka-clients-X.jar ErrorCodes.java`).
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.protocol.Errors;

public class ErrorCodes {
    public static void main(String[] args) {
        System.out.println("code\tname\tjava_exception\tretriable\tmessage");
        for (Errors error : Errors.values()) {
            ApiException exception = error.exception();
            String cls = exception == null ? "-" : exception.getClass().getSimpleName();
            boolean retriable = exception instanceof RetriableException;
            String message = error == Errors.NONE ? "" : error.message();
            System.out.println(error.code() + "\t" + error.name() + "\t" + cls + "\t"
                + retriable + "\t" + message.replace('\t', ' ').replace('\n', ' '));
        }
    }
}
