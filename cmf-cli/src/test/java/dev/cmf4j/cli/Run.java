package dev.cmf4j.cli;

import picocli.CommandLine;

import java.io.PrintWriter;
import java.io.StringWriter;

/** One in-process {@code cmf} invocation with its exit code and captured stdout/stderr (CLI tests). */
record Run(int code, String out, String err) {
    static Run run(String... args) {
        CommandLine cl = Cmf.commandLine();
        StringWriter out = new StringWriter(), err = new StringWriter();
        cl.setOut(new PrintWriter(out));
        cl.setErr(new PrintWriter(err));
        int code = cl.execute(args);
        return new Run(code, out.toString(), err.toString());
    }
}
