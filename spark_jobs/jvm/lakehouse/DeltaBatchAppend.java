package lakehouse;

import java.util.List;
import java.util.Map;

import org.apache.spark.api.python.PythonUtils;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.delta.DeltaLog;
import org.apache.spark.sql.delta.DeltaOperations;
import org.apache.spark.sql.delta.DeltaOptions;
import org.apache.spark.sql.delta.OptimisticTransaction;
import org.apache.spark.sql.delta.Snapshot;
import org.apache.spark.sql.delta.actions.Action;
import org.apache.spark.sql.delta.commands.DMLUtils;
import org.apache.spark.sql.delta.commands.WriteIntoDelta;

import scala.Option;

/**
 * A micro-batch appended to a Delta table in one commit that records the app transaction (appId, version): what
 * {@code df.write.format("delta").mode("append").option("txnAppId", ...).option("txnVersion", ...).save(path)}
 * commits, through the same command (WriteIntoDelta: schema enforcement, constraints, statistics, the
 * SetTransaction action), without that command's own "was this version written already?" lookup.
 *
 * <p>Delta 4.4 answers that lookup from the snapshot's reconstructed state, a Spark job per write that costs a small
 * batch more than its data (bench/micro_batch_cost.py). The caller has already answered it from the table's log
 * at version {@code readVersion} (include.storage.delta.batch_check) and holds the job's lease. The transaction starts
 * from that version and counts the app id as read: should another writer of the same app id (a driver that took the
 * lease over while this one was paused) commit after it, Delta's conflict check refuses this commit
 * (ConcurrentTransactionException) instead of appending the batch twice.
 */
public final class DeltaBatchAppend {
    private DeltaBatchAppend() {
    }

    /**
     * Appends {@code data} to the table at {@code path} as batch {@code version} of {@code appId}, found not written
     * yet at table version {@code readVersion}; the committed version, or -1 when nothing was committed.
     */
    public static long append(Dataset<Row> data, String path, String appId, long version, long readVersion) {
        SparkSession spark = data.sparkSession();
        DeltaLog log = DeltaLog.forTable(spark, path);
        DeltaOptions options = new DeltaOptions(
                PythonUtils.toScalaMap(Map.of("txnAppId", appId, "txnVersion", Long.toString(version))),
                spark.sessionState().conf());
        WriteIntoDelta write = new WriteIntoDelta(log, SaveMode.Append, options, PythonUtils.toSeq(List.<String>of()),
                PythonUtils.toScalaMap(Map.<String, String>of()), data, Option.empty(), Option.empty(), false);
        DeltaOperations.Write operation = new DeltaOperations.Write(SaveMode.Append,
                Option.apply(PythonUtils.toSeq(List.<String>of())), Option.empty(), Option.empty(), Option.empty(),
                Option.empty(), Option.empty(), Option.empty(), Option.empty());
        Option<Snapshot> read = readVersion >= 0  // none yet: a new table
                ? Option.apply(log.getSnapshotAt(readVersion, Option.empty(), Option.empty(), false)) : Option.empty();
        OptimisticTransaction txn = log.startTransaction(Option.empty(), read);  // a path-based table
        txn.readTxn().$plus$eq(appId);  // a later commit of this app id conflicts
        Option<Object> committed = OptimisticTransaction.withActive(txn, true, () -> {
            DMLUtils.TaggedCommitData<Action> commit = write.writeAndReturnCommitData(txn, spark, Option.empty(), false);
            return txn.commitIfNeeded(commit.actions(), operation, commit.stringTags());
        });
        return committed.isDefined() ? (Long) committed.get() : -1L;
    }
}
