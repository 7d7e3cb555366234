package dev.cmf4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

import java.util.List;

/**
 * The {@code cmf} command. Each subcommand is one class in this package; register new ones in
 * {@link #COMMANDS} below (keep the list alphabetical to avoid merge collisions).
 */
@Command(name = "cmf", mixinStandardHelpOptions = true, versionProvider = Cmf.Version.class,
        description = "Run, inspect and convert CMF language models on the JVM.")
public final class Cmf implements Runnable {
    /** The subcommands, in the order help lists them. */
    static final List<Class<?>> COMMANDS = List.of(
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
            TokenizeCommand.class);

    @CommandLine.Spec CommandLine.Model.CommandSpec spec;

    @Override public void run() {
        spec.commandLine().usage(System.out);
    }

    public static void main(String[] args) {
        if (Relaunch.needed()) System.exit(Relaunch.withVectorModule(args));   // java -jar cmf.jar without --add-modules
        System.exit(commandLine(args).execute(args));
    }

    /** The configured command line with every subcommand (tests call {@code execute} on it). */
    public static CommandLine commandLine() {
        return configured(COMMANDS);
    }

    /**
     * The command line for these arguments: when the first names a subcommand, the root with that one alone
     * ({@code help} and anything else get every command).
     * Picocli reflects over a command's options, mixins and initializers when it is added, and doing that for
     * every command took a third of a fresh {@code cmf run}'s time before the model opened.
     */
    static CommandLine commandLine(String[] args) {
        if (args.length > 0)
            for (Class<?> c : COMMANDS.subList(1, COMMANDS.size()))
                if (c.getAnnotation(Command.class).name().equals(args[0])) return configured(List.of(c));
        return commandLine();
    }

    private static CommandLine configured(List<Class<?>> commands) {
        CommandLine cl = new CommandLine(new Cmf());
        for (Class<?> c : commands) cl.addSubcommand(c);
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
