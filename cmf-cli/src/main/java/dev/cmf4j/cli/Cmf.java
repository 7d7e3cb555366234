package dev.cmf4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/**
 * The {@code cmf} command. Each subcommand is one class in this package; register new ones in
 * {@code subcommands} below (keep the list alphabetical to avoid merge collisions).
 */
@Command(name = "cmf", mixinStandardHelpOptions = true, versionProvider = Cmf.Version.class,
        description = "Run, inspect and convert CMF language models on the JVM.",
        subcommands = {
                CommandLine.HelpCommand.class,
                BenchCommand.class,
                BenchOpenCommand.class,
                ChatCommand.class,
                CompactCommand.class,
                ConvertCommand.class,
                DetokenizeCommand.class,
                DevicesCommand.class,
                ExportHfCommand.class,
                GenerateCommand.class,
                InfoCommand.class,
                LogitsCommand.class,
                PplCommand.class,
                ProbeRecallCommand.class,
                PullCommand.class,
                RouteCommand.class,
                RunCommand.class,
                SelftestCommand.class,
                ServeCommand.class,
                SkillCommand.class,
                TemplateCommand.class,
                TensorCommand.class,
                TokenizeCommand.class,
        })
public final class Cmf implements Runnable {
    @CommandLine.Spec CommandLine.Model.CommandSpec spec;

    @Override public void run() {
        spec.commandLine().usage(System.out);
    }

    public static void main(String[] args) {
        if (Relaunch.needed()) System.exit(Relaunch.withVectorModule(args));   // java -jar cmf.jar without --add-modules
        System.exit(commandLine().execute(args));
    }

    /** The configured command line (tests call {@code execute} on it). */
    public static CommandLine commandLine() {
        CommandLine cl = new CommandLine(new Cmf());
        cl.setExecutionExceptionHandler(new Errors());
        return cl;
    }

    static final class Version implements CommandLine.IVersionProvider {
        @Override public String[] getVersion() {
            String v = Cmf.class.getPackage().getImplementationVersion();
            return new String[] {"cmf4j " + (v == null ? "dev" : v) + " (Java " + Runtime.version() + ")"};
        }
    }
}
