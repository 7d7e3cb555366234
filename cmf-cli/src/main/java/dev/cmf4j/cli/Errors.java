package dev.cmf4j.cli;

import picocli.CommandLine;

import java.io.UncheckedIOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.DirectoryNotEmptyException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.NoSuchFileException;
import java.nio.file.NotDirectoryException;

/**
 * Turns exceptions into one clear line on stderr and exit code 1 (a stack trace only with CMF_DEBUG=1).
 * Expected user errors (bad file, bad flag values) are not bugs and must not look like crashes.
 */
final class Errors implements CommandLine.IExecutionExceptionHandler {
    @Override
    public int handleExecutionException(Exception ex, CommandLine cl, CommandLine.ParseResult parsed) {
        cl.getErr().println("cmf: error: " + message(ex));
        if ("1".equals(System.getenv("CMF_DEBUG"))) ex.printStackTrace(cl.getErr());
        return 1;
    }

    /** The line to print: a file the JDK could not open says why, not just its name ("m.json: no such file"). */
    static String message(Throwable ex) {
        if (ex instanceof UncheckedIOException u && u.getCause() != null) ex = u.getCause();
        if (ex instanceof FileSystemException f && f.getReason() == null) {
            String why = switch (f) {
                case NoSuchFileException x -> "no such file";
                case AccessDeniedException x -> "permission denied";
                case NotDirectoryException x -> "not a directory";
                case FileAlreadyExistsException x -> "already exists";
                case DirectoryNotEmptyException x -> "directory not empty";
                default -> "file system error";
            };
            return f.getMessage() + ": " + why;
        }
        return ex.getMessage() == null ? ex.getClass().getSimpleName() : ex.getMessage();
    }
}
