package lakehouse;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;

import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's raw local file system, its two shell commands made system calls (java.nio). Without Hadoop's native
 * library (pyspark ships none), {@link RawLocalFileSystem} sets a permission by running {@code chmod} and reads a
 * link by running {@code readlink}: a process each, and every file Spark's checkpoint manager writes (created with a
 * permission, then renamed over FileContext, which reads both names' links) started several, about 3 ms of CPU
 * each; so did each commit of a Delta table's log. Everything else is Hadoop's own. {@link NioLocalFs} puts it under
 * the FileContext API's {@code file:} scheme (include/spark_session.py). The FileSystem API's ({@code fs.file.impl})
 * keeps Hadoop's: spark-submit opens local files through it before the project's jar is loaded.
 */
public class NioRawLocalFileSystem extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
        if (NativeIO.isAvailable() || permission.getStickyBit()) {  // Hadoop's way (java.nio has no sticky bit)
            super.setPermission(p, permission);
            return;
        }
        String symbols = permission.getUserAction().SYMBOL + permission.getGroupAction().SYMBOL
                + permission.getOtherAction().SYMBOL;
        Files.setPosixFilePermissions(pathToFile(p).toPath(), PosixFilePermissions.fromString(symbols));
    }

    @Override
    public FileStatus getFileLinkStatus(Path f) throws IOException {
        if (Files.isSymbolicLink(pathToFile(f).toPath())) {
            return super.getFileLinkStatus(f);  // a link: Hadoop's way
        }
        return getFileStatus(f);  // a file or a directory (or nothing: FileNotFoundException), as Hadoop returns it
    }
}
