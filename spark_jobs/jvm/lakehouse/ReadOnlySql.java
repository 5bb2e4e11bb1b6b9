package lakehouse;

import java.util.regex.Pattern;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * A Spark SQL extension ({@code spark.sql.extensions}) that makes a session read-only: a check rule, run after
 * analysis and before any command executes, refuses every command but those that only read or describe (SHOW,
 * DESCRIBE, EXPLAIN, USE, SET). DROP, INSERT, UPDATE, DELETE, MERGE, ALTER, CREATE (OR REPLACE), TRUNCATE,
 * OPTIMIZE, VACUUM and RESTORE are refused with one line naming the statement; nothing is changed. The lakehouse's
 * SQL endpoint runs with it: the pipelines stay the only writers.
 */
public final class ReadOnlySql extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  /** Commands that read: their plan classes' simple names. */
  private static final Pattern READS =
      Pattern.compile("(Show|Describe|Explain).*|SetCommand|ResetCommand|SetCatalogAndNamespace|SetNamespaceCommand"
          + "|SetCatalogCommand");

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
      @Override
      public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
        return new Check();
      }
    });
    return BoxedUnit.UNIT;
  }

  /** The check rule: throws on the first command that would write. */
  static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> {
    @Override
    public BoxedUnit apply(LogicalPlan plan) {
      String refused = firstWrite(plan);
      if (refused != null) {
        throw new IllegalStateException("read-only: " + statement(refused) + " is refused (the lakehouse's "
            + "tables are written by its pipelines only; plan " + refused + ")");
      }
      return BoxedUnit.UNIT;
    }
  }

  static String firstWrite(LogicalPlan plan) {
    String name = plan.getClass().getSimpleName();
    if (plan instanceof Command && !READS.matcher(name).matches()) {
      return name;
    }
    for (LogicalPlan child : CollectionConverters.asJava(plan.children())) {
      String refused = firstWrite(child);
      if (refused != null) {
        return refused;
      }
    }
    return null;
  }

  /** The SQL statement a write plan comes from, as a person wrote it. */
  static String statement(String plan) {
    String[][] statements = {
      {"DropNamespace", "DROP DATABASE"}, {"CreateNamespace", "CREATE DATABASE"}, {"AlterNamespace", "ALTER DATABASE"},
      {"DropColumns", "ALTER TABLE"}, {"AddColumns", "ALTER TABLE"}, {"ReplaceColumns", "ALTER TABLE"},
      {"RenameColumn", "ALTER TABLE"}, {"AlterColumn", "ALTER TABLE"}, {"SetTable", "ALTER TABLE"},
      {"UnsetTable", "ALTER TABLE"}, {"SetLocation", "ALTER TABLE"}, {"RenameTable", "ALTER TABLE"},
      {"Alter", "ALTER TABLE"}, {"DropView", "DROP VIEW"}, {"Drop", "DROP TABLE"}, {"Insert", "INSERT"},
      {"Append", "INSERT"}, {"Overwrite", "INSERT OVERWRITE"}, {"Update", "UPDATE"}, {"Delete", "DELETE"},
      {"Merge", "MERGE"}, {"Replace", "CREATE OR REPLACE"}, {"CreateView", "CREATE VIEW"}, {"Create", "CREATE"},
      {"Truncate", "TRUNCATE"}, {"Optimize", "OPTIMIZE"}, {"Vacuum", "VACUUM"}, {"Restore", "RESTORE"},
      {"Cache", "CACHE TABLE"}, {"Uncache", "UNCACHE TABLE"}, {"Analyze", "ANALYZE TABLE"},
      {"Refresh", "REFRESH TABLE"}, {"Repair", "REPAIR TABLE"},
    };
    for (String[] entry : statements) {
      if (plan.startsWith(entry[0])) {
        return entry[1];
      }
    }
    return plan;
  }
}
