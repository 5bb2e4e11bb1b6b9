package lakehouse;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

import io.delta.storage.HadoopFileSystemLogStore;

/**
 * Delta's log store for {@code s3a://} tables that stays safe with several writing processes (drivers on other hosts,
 * an OPTIMIZE beside a live writer): a commit file is put with S3's conditional create, so of two writers of version N
 * exactly one succeeds and the other gets {@link java.nio.file.FileAlreadyExistsException}, on which Delta checks for
 * conflicts and retries at N + 1. Delta 4.4's default for S3 ({@code S3SingleDriverLogStore}) checks and writes in two
 * steps under a lock of one JVM: two drivers can both write version N, and one commit is lost.
 *
 * <p>Set by the lakehouse's Spark sessions as {@code spark.delta.logStore.s3a.impl} (include/spark_session.py).
 */
public class ConditionalS3LogStore extends HadoopFileSystemLogStore {
    public ConditionalS3LogStore(Configuration initHadoopConf) {
        super(initHadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        ByteArrayOutputStream body = new ByteArrayOutputStream();
        while (actions.hasNext()) {
            body.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
        if (overwrite) {  // _last_checkpoint and the like: a PUT replaces the object whole
            try (FSDataOutputStream out = fs.createFile(path).overwrite(true).recursive().build()) {
                out.write(body.toByteArray());
            }
            return;
        }
        if (!ConditionalWrites.createIfAbsent(fs, path, body.toByteArray())) {
            throw new java.nio.file.FileAlreadyExistsException(path.toString());
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;  // an object appears whole when its PUT completes
    }
}
