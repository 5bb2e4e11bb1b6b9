package lakehouse;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The login of the lakehouse's SQL endpoint (HiveServer2's CUSTOM authentication,
 * {@code hive.server2.custom.authentication.class}): one user and password, read from the server's
 * environment ({@code LAKEHOUSE_SQL_USER}, {@code LAKEHOUSE_SQL_PASSWORD}, set by {@code lakehouse sql up}),
 * compared in constant time. Anything else is refused with one line.
 */
public final class SqlLogin implements PasswdAuthenticationProvider {
  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String expectedUser = System.getenv("LAKEHOUSE_SQL_USER");
    String expectedPassword = System.getenv("LAKEHOUSE_SQL_PASSWORD");
    if (expectedUser == null || expectedPassword == null || expectedPassword.isEmpty()) {
      throw new AuthenticationException("the lakehouse's SQL endpoint has no login configured");
    }
    boolean userMatches = MessageDigest.isEqual(bytes(user), bytes(expectedUser));
    boolean passwordMatches = MessageDigest.isEqual(bytes(password), bytes(expectedPassword));
    if (!(userMatches & passwordMatches)) {
      throw new AuthenticationException("wrong user or password for the lakehouse's SQL endpoint");
    }
  }

  private static byte[] bytes(String value) {
    return (value == null ? "" : value).getBytes(StandardCharsets.UTF_8);
  }
}
