package lakehouse;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.io.StringWriter;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The top-level fields of a landing line (or Kafka value) that its source's schema does not name, as one JSON object
 * with their values as sent, or null when there are none (bronze's {@code _rescued} column).
 *
 * <p>One streaming pass of Jackson over the line's UTF-8 bytes: a named field's value is skipped unread, another
 * field's value is copied whole (a number, text, object or array). Names match exactly ({@code Device} is not
 * {@code device}). A line that is not one JSON object gives null: the strict parse (StrictJsonReason) sends it to the
 * quarantine, whose row keeps the whole line.
 */
public final class RescuedFields implements UDF2<byte[], String, String> {
  private static final long serialVersionUID = 1L;
  private static final JsonFactory FACTORY = new JsonFactory();

  private transient String namesKey;
  private transient Set<String> names;

  @Override
  public String call(byte[] line, String schemaColumns) {
    if (line == null) {
      return null;
    }
    if (!schemaColumns.equals(namesKey)) {
      names = new HashSet<>(Arrays.asList(schemaColumns.split(",")));
      namesKey = schemaColumns;
    }
    try (JsonParser parser = FACTORY.createParser(line)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      StringWriter out = null;
      JsonGenerator rescued = null;
      JsonToken token;
      while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        parser.nextToken();
        if (names.contains(name)) {
          parser.skipChildren();  // a scalar stays as it is; an object or array is passed over
          continue;
        }
        if (rescued == null) {
          out = new StringWriter();
          rescued = FACTORY.createGenerator(out);
          rescued.writeStartObject();
        }
        rescued.writeFieldName(name);
        rescued.copyCurrentStructure(parser);
      }
      if (token != JsonToken.END_OBJECT || rescued == null) {
        return null;
      }
      rescued.writeEndObject();
      rescued.close();
      return out.toString();
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }
}
