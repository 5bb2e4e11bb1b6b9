package lakehouse;

import java.io.IOException;
import java.io.InputStream;
import java.util.Arrays;

import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;

/**
 * Writing a whole file on an object store only if no file has that name: Hadoop S3A's conditional create
 * ({@code If-None-Match: *}, checked by the store when the object is put). What the lakehouse's Delta log store
 * ({@link ConditionalS3LogStore}) and checkpoint file manager ({@link ConditionalCheckpointFileManager}) share.
 */
final class ConditionalWrites {
    private ConditionalWrites() {
    }

    /** Whether {@code fs} creates files conditionally at {@code path} (S3A does; a local file system does not). */
    static boolean supported(FileSystem fs, Path path) {
        try {
            return fs.hasPathCapability(path, Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE);
        } catch (IOException e) {
            return false;
        }
    }

    /**
     * Puts {@code body} at {@code path} if nothing is there; false when another writer's file is there. A rejection
     * of a put that had in fact succeeded (its answer lost, the client retried) is recognised by the content: the
     * object holds {@code body}, so the write is ours.
     */
    static boolean createIfAbsent(FileSystem fs, Path path, byte[] body) throws IOException {
        try (FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path).overwrite(false).recursive()
                .must(Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE, true).build()) {
            out.write(body);
        } catch (IOException e) {
            if (!rejected(e)) {
                throw e;
            }
            return holds(fs, path, body);
        }
        return true;
    }

    /** Whether S3A refused a conditional put because the object exists (412), or a concurrent one (409). */
    static boolean rejected(IOException e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            String message = String.valueOf(t.getMessage());
            if (name.equals("org.apache.hadoop.fs.s3a.RemoteFileChangedException")
                    || t instanceof org.apache.hadoop.fs.FileAlreadyExistsException
                    || message.contains("PreconditionFailed") || message.contains("412")
                    || message.contains("ConditionalRequestConflict")) {
                return true;
            }
        }
        return false;
    }

    private static boolean holds(FileSystem fs, Path path, byte[] body) throws IOException {
        try (InputStream in = fs.open(path)) {
            return Arrays.equals(in.readAllBytes(), body);
        } catch (java.io.FileNotFoundException e) {
            return false;
        }
    }
}
