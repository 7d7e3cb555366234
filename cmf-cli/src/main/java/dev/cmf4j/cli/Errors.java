package dev.cmf4j.cli;

import picocli.CommandLine;

/**
 * Turns exceptions into one clear line on stderr and exit code 1 (a stack trace only with CMF_DEBUG=1).
 * Expected user errors (bad file, bad flag values) are not bugs and must not look like crashes.
 */
final class Errors implements CommandLine.IExecutionExceptionHandler {
    @Override
    public int handleExecutionException(Exception ex, CommandLine cl, CommandLine.ParseResult parsed) {
        String msg = ex.getMessage() == null ? ex.getClass().getSimpleName() : ex.getMessage();
        cl.getErr().println("cmf: error: " + msg);
        if ("1".equals(System.getenv("CMF_DEBUG"))) ex.printStackTrace(cl.getErr());
        return 1;
    }
}
