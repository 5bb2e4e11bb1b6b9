package lakehouse;

import java.io.ByteArrayOutputStream;
import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager for checkpoints on an object store: no temporary file and rename (S3A emulates a
 * rename by copy and delete, and checks "does the target exist?" in a separate request), but one PUT per file, and
 * for the files that must not be replaced (the offset and commit logs, the query's metadata) S3's conditional create:
 * a second writer of batch N's offsets or commit (a driver that lost its lease, paused past it) fails, as Spark's
 * contract says ({@link org.apache.hadoop.fs.FileAlreadyExistsException}), and nothing it wrote replaces the
 * holder's. On a file system without conditional creates (a local disk) it is Spark's default manager.
 *
 * <p>Spark's own object-store manager ({@code AbortableStreamBasedCheckpointFileManager}, spark-hadoop-cloud) is not
 * published for Spark 4.2 and checks "exists" separately from the write, logging rather than raising a failed close.
 * Set as {@code spark.sql.streaming.checkpointFileManagerClass} (include/spark_session.py).
 */
public class ConditionalCheckpointFileManager extends FileContextBasedCheckpointFileManager {
    private final FileSystem fs;
    private final boolean conditional;

    public ConditionalCheckpointFileManager(Path path, Configuration hadoopConf) throws IOException {
        super(path, hadoopConf);
        this.fs = path.getFileSystem(hadoopConf);
        this.conditional = ConditionalWrites.supported(fs, path);
    }

    @Override
    public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
        if (!conditional) {
            return super.createAtomic(path, overwriteIfPossible);
        }
        try {
            return overwriteIfPossible ? replacing(path) : creating(path);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** A state file (a RocksDB snapshot, a changelog): streamed, visible whole when closed, nothing when cancelled. */
    private CancellableFSDataOutputStream replacing(Path path) throws IOException {
        FSDataOutputStream stream = fs.createFile(path).overwrite(true).recursive().build();
        return new CancellableFSDataOutputStream(stream) {
            private boolean done;

            @Override
            public synchronized void cancel() {
                if (done) {
                    return;
                }
                done = true;
                try {
                    stream.abort();
                } catch (UnsupportedOperationException ignored) {
                    // nothing was put: the object store keeps what it had
                }
            }

            @Override
            public synchronized void close() throws IOException {
                if (!done) {
                    done = true;
                    stream.close();
                }
            }
        };
    }

    /** A log file (offsets, commits, metadata): kept in memory (they are small), put only if absent when closed. */
    private CancellableFSDataOutputStream creating(Path path) {
        ByteArrayOutputStream buffer = new ByteArrayOutputStream();
        return new CancellableFSDataOutputStream(buffer) {
            private boolean done;

            @Override
            public synchronized void cancel() {
                done = true;
            }

            @Override
            public synchronized void close() throws IOException {
                if (done) {
                    return;
                }
                done = true;
                super.close();
                if (!ConditionalWrites.createIfAbsent(fs, path, buffer.toByteArray())) {
                    throw new org.apache.hadoop.fs.FileAlreadyExistsException(
                            path + " already exists: another writer (a second driver of this checkpoint) wrote it");
                }
            }
        };
    }
}
