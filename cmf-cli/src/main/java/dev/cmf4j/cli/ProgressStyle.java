package dev.cmf4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.ParameterException;

import java.util.Locale;

/** {@code --progress auto|bar|lines|none}: a redrawn bar on a terminal, plain lines for logs and pipes, or nothing. */
enum ProgressStyle {
    BAR, LINES, NONE;

    static ProgressStyle parse(String s, CommandLine cl) {
        return switch (s.toLowerCase(Locale.ROOT)) {
            case "auto" -> System.console() != null ? BAR : LINES;
            case "bar" -> BAR;
            case "lines" -> LINES;
            case "none" -> NONE;
            default -> throw new ParameterException(cl, "--progress must be auto, bar, lines or none");
        };
    }

    dev.cmf4j.hub.TransferProgress download() {
        return switch (this) {
            case BAR -> dev.cmf4j.hub.TransferProgress.bar(System.err);
            case LINES -> dev.cmf4j.hub.TransferProgress.lines(System.err);
            case NONE -> dev.cmf4j.hub.TransferProgress.NONE;
        };
    }

    dev.cmf4j.convert.Progress conversion() {
        return switch (this) {
            case BAR -> dev.cmf4j.convert.Progress.bar(System.err);
            case LINES -> dev.cmf4j.convert.Progress.lines(System.err);
            case NONE -> dev.cmf4j.convert.Progress.NONE;
        };
    }
}
