package lakehouse;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.io.FileNotFoundException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.fs.s3a.Listing;
import org.apache.hadoop.fs.s3a.S3AFileStatus;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import org.apache.hadoop.fs.s3a.S3ListRequest;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;

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

    /**
     * The log's files from {@code path} on, by one listing that starts after it (S3's start-after): the inherited
     * listing reads the whole {@code _delta_log}, which grows with every commit until log retention removes it, so a
     * live table's every update would cost more with its age. What Delta's own {@code delta.enableFastS3AListFrom}
     * does (its helper is compiled against another Hadoop and fails on 3.5), without its existence check on every
     * call: only an empty listing asks whether the log exists.
     */
    @Override
    public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (!(fs instanceof S3AFileSystem s3a)) {
            return super.listFrom(path, hadoopConf);
        }
        Path resolved = s3a.makeQualified(path);
        Path log = resolved.getParent();
        String logKey = s3a.pathToKey(log) + "/";
        ListObjectsV2Request request = ListObjectsV2Request.builder()
                .bucket(s3a.getBucket())
                .prefix(logKey)
                .delimiter("/")
                .startAfter(logKey + keyBefore(resolved.getName()))
                .build();
        List<FileStatus> listed = new ArrayList<>();
        RemoteIterator<S3AFileStatus> statuses = s3a.getListing().createFileStatusListingIterator(
                log, S3ListRequest.v2(request), status -> true, new Listing.AcceptAllButSelfAndS3nDirs(log),
                s3a.getActiveAuditSpan());
        while (statuses.hasNext()) {
            S3AFileStatus status = statuses.next();
            if (status.isFile()) {
                listed.add(status);
            }
        }
        if (listed.isEmpty() && !s3a.exists(log)) {
            throw new FileNotFoundException("No such file or directory: " + log);
        }
        listed.sort(Comparator.comparing(status -> status.getPath().getName()));
        return listed.iterator();
    }

    /** The greatest name below {@code name} that S3 can start after, so that {@code name} itself is listed. */
    private static String keyBefore(String name) {
        char last = name.charAt(name.length() - 1);
        return name.substring(0, name.length() - 1) + (char) (last - 1) + Character.MAX_VALUE;
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;  // an object appears whole when its PUT completes
    }
}
