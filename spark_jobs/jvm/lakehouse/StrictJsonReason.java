package lakehouse;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The quarantine reason of a landing line under a strict JSON parse, or null for exactly one JSON object.
 *
 * <p>One streaming pass of Jackson over the line's UTF-8 bytes (no decoding to a Java string), with duplicate detection on, nothing lenient, and the
 * end of the line checked: {@code malformed_json} (not JSON, or a JSON value that is not an object),
 * {@code trailing_content} (anything after the object), {@code duplicate_key} (at any depth),
 * {@code non_finite_number} (NaN, Infinity, or a number beyond a double such as 1e400) and
 * {@code wrong_type} (an object or array for one of {@code textFields}, the comma-separated columns Spark
 * reads as text). Spark's own reader, which stops after the first value and keeps the last of two equal
 * keys, still types the columns; this function says whether it may.
 */
public final class StrictJsonReason implements UDF2<byte[], String, String> {
  private static final long serialVersionUID = 1L;
  private static final JsonFactory FACTORY =
      JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();

  private transient String fieldsKey;
  private transient Set<String> fields;

  @Override
  public String call(byte[] line, String textFields) {
    if (line == null) {
      return null;
    }
    if (!textFields.equals(fieldsKey)) {
      fields = new HashSet<>(Arrays.asList(textFields.split(",")));
      fieldsKey = textFields;
    }
    try (JsonParser parser = FACTORY.createParser(line)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return "malformed_json";
      }
      String reason = walkObject(parser);
      if (reason != null) {
        return reason;
      }
      try {
        if (parser.nextToken() != null) {
          return "trailing_content";
        }
      } catch (JsonProcessingException afterTheObject) {
        return "trailing_content";
      }
      return null;
    } catch (JsonProcessingException e) {
      String message = String.valueOf(e.getOriginalMessage());
      if (message.startsWith("Duplicate field")) {
        return "duplicate_key";
      }
      if (message.startsWith("Non-standard token")) {
        return "non_finite_number";
      }
      return "malformed_json";
    } catch (IOException | RuntimeException e) {
      return "malformed_json";
    }
  }

  /** The top-level object (its START_OBJECT read): a value that breaks a rule, or null once it closes. */
  private String walkObject(JsonParser parser) throws IOException {
    String wrongType = null;
    JsonToken token;
    while ((token = parser.nextToken()) != JsonToken.END_OBJECT) {
      if (token == null) {
        return "malformed_json";
      }
      String name = parser.currentName();
      JsonToken value = parser.nextToken();
      if (value == JsonToken.START_OBJECT || value == JsonToken.START_ARRAY) {
        if (wrongType == null && fields.contains(name)) {
          wrongType = "wrong_type";
        }
        String nested = walkNested(parser);
        if (nested != null) {
          return nested;
        }
      } else if (!finite(parser, value)) {
        return "non_finite_number";
      }
    }
    return wrongType;
  }

  /** A nested object or array (its start read) to its end: non-finite numbers, duplicates (Jackson). */
  private static String walkNested(JsonParser parser) throws IOException {
    int depth = 1;
    while (depth > 0) {
      JsonToken token = parser.nextToken();
      if (token == null) {
        return "malformed_json";
      }
      if (token.isStructStart()) {
        depth++;
      } else if (token.isStructEnd()) {
        depth--;
      } else if (!finite(parser, token)) {
        return "non_finite_number";
      }
    }
    return null;
  }

  private static boolean finite(JsonParser parser, JsonToken token) throws IOException {
    if (token != JsonToken.VALUE_NUMBER_FLOAT && token != JsonToken.VALUE_NUMBER_INT) {
      return true;
    }
    // Fewer than 300 characters and no exponent: within a double's range without converting it (the common case).
    char[] text = parser.getTextCharacters();
    int start = parser.getTextOffset();
    int length = parser.getTextLength();
    if (length < 300) {
      boolean exponent = false;
      for (int i = start; i < start + length && !exponent; i++) {
        exponent = text[i] == 'e' || text[i] == 'E';
      }
      if (!exponent) {
        return true;
      }
    }
    return !Double.isInfinite(parser.getDoubleValue());
  }
}
