package dev.cmf4j.cli;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cuda.CudaBackend;
import dev.cmf4j.backend.cuda.DeviceChoice;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.TextCodec;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.server.OpenAiServer;
import dev.cmf4j.server.ServedModel;
import dev.cmf4j.server.ServerConfig;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;

/** {@code cmf serve FILE}: the OpenAI-compatible HTTP API with continuous batching, until stopped. */
@Command(name = "serve", mixinStandardHelpOptions = true,
        description = {"Serve a model over an OpenAI-compatible HTTP API (chat and text completions, streaming, "
                + "models, tokenize, metrics) to many clients at once.",
                "Binds 127.0.0.1 unless --host says otherwise; /health answers 503 while the model loads."})
public final class ServeCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", arity = "0..1", paramLabel = "FILE", description = "the .cmf model (default: the bundled models/default.cmf)")
    Path file;

    @Mixin ModelFile.Overrides overrides;

    @Option(names = "--host", paramLabel = "ADDR", defaultValue = "127.0.0.1", description = "address to bind (default ${DEFAULT-VALUE}; 0.0.0.0 for every interface)")
    String host;

    @Option(names = "--port", paramLabel = "N", defaultValue = "8080", description = "port (default ${DEFAULT-VALUE}; 0 picks a free one)")
    int port;

    @Option(names = "--parallel", paramLabel = "N", defaultValue = "4", description = "sequences decoded together (default ${DEFAULT-VALUE}); more wait in the queue")
    int parallel;

    @Option(names = "--ctx", paramLabel = "N", defaultValue = "4096", description = "context of each sequence in tokens, prompt and output (default ${DEFAULT-VALUE}, capped by the model); not divided among sequences")
    int ctx;

    @Option(names = "--max-queue", paramLabel = "N", defaultValue = "64", description = "requests waiting at most (default ${DEFAULT-VALUE}); past it: 429 with Retry-After")
    int maxQueue;

    @Option(names = "--timeout", paramLabel = "S", defaultValue = "600", description = "seconds a request may take in all (default ${DEFAULT-VALUE})")
    int timeout;

    @Option(names = "--max-body", paramLabel = "BYTES", defaultValue = "4194304", description = "largest request body (default ${DEFAULT-VALUE})")
    int maxBody;

    @Option(names = "--state-dir", paramLabel = "DIR",
            description = "enable POST /slots/{id}?action=save|restore|erase: sequence state files are written to and read from DIR "
                    + "(created when missing; plain file names only); off without it")
    Path stateDir;

    @Option(names = "--replicas", paramLabel = "N", defaultValue = "1",
            description = "a whole copy of the model on each of the first N NVIDIA GPUs (needs --device cuda; for models that"
                    + " fit one GPU), each with its own scheduler of --parallel sequences; a request goes to the copy with the"
                    + " fewest sequences (default ${DEFAULT-VALUE})")
    int replicas;

    @Option(names = "--name", paramLabel = "ID", description = "the model's id in the API (default: the file name without .cmf)")
    String name;

    @ArgGroup(exclusive = true) Key key;

    static final class Key {
        @Option(names = "--api-key", paramLabel = "KEY", description = "require 'Authorization: Bearer KEY' on every endpoint but /health")
        String value;

        @Option(names = "--api-key-file", paramLabel = "F", description = "as --api-key, the key read from the file's first line (keeps it out of ps)")
        Path file;
    }

    @Mixin DeviceOption device;

    @Mixin DraftOptions draft;

    @Override public Integer call() throws Exception {
        if (parallel < 1) throw new IllegalArgumentException("--parallel must be >= 1, got " + parallel);
        if (ctx < 2) throw new IllegalArgumentException("--ctx must be >= 2, got " + ctx);
        if (maxQueue < 0) throw new IllegalArgumentException("--max-queue must be >= 0, got " + maxQueue);
        if (timeout < 1) throw new IllegalArgumentException("--timeout must be >= 1 second, got " + timeout);
        checkReplicas();
        String apiKey = key == null ? null : key.value != null ? key.value : readKey(key.file);
        Path model = ModelFile.resolve(file);
        String id = name != null ? name : model.getFileName().toString().replaceFirst("\\.cmf$", "");
        PrintWriter err = spec.commandLine().getErr();
        ServerConfig cfg = new ServerConfig(host, port, apiKey, maxBody, Duration.ofSeconds(timeout), 16, stateDir);
        HELIDON_LOG.setLevel(java.util.logging.Level.WARNING);   // its start-up notes would bury the request lines
        OpenAiServer server = new OpenAiServer(cfg, line -> { synchronized (err) { err.println("cmf serve: " + line); err.flush(); } });
        int bound = server.start();
        err.println("cmf serve: listening on http://" + host + ":" + bound + " (loading " + model + ")");
        err.flush();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> { server.close(); stopped.countDown(); }));
        ServedModel served;
        try {
            // the backends live as long as the process: one device, or one GPU per replica
            List<? extends Backend> backends = replicas == 1 ? List.of(device.open(err)) : openReplicas(err);
            if ("auto".equals(overrides.skill)) throw new IllegalArgumentException("--skill auto needs routing descriptors");
            List<ServedModel.Replica> copies = new ArrayList<>();
            TextCodec codec = null;
            Model first = null;
            for (int r = 0; r < backends.size(); r++) {
                Backend backend = backends.get(r);
                Model m = overrides.open(model, backend);
                if (first == null) { first = m; codec = TextCodec.of(m.file()); }
                // a step holds every running sequence's decode row and room for a prompt chunk of the device's size
                // (with only max(parallel, chunk) rows, 64 decoding sequences left no room and new prompts waited)
                var dev = m.graph().device();
                int chunk = dev != null ? Math.min(dev.preferredChunk(), ctx) : Session.DEFAULT_CHUNK;
                Model dm = draft.open(m, backend);
                // drafts add up to --draft-max rows per sequence to a step
                int rows = parallel * (1 + (draft.on() ? draft.draftMax : 0)) + chunk;
                String where = replicas == 1 ? backend.device() : backend.device() + ":" + r;
                copies.add(ServedModel.Replica.start(r, where, m, codec, new Scheduler.Config(parallel, ctx, maxQueue, rows, chunk, parallel),
                        dm, draft.draftMax, draft.mtp()));
            }
            served = new ServedModel(id, codec, copies, first.graph().withTask(first.graph().overlay(overrides.skill, null, 1f), overrides.task));
            served.warmUp();
            server.ready(served);
        } catch (RuntimeException e) {
            server.close();
            throw e;
        }
        err.println("cmf serve: ready: model '" + id + "', " + (replicas == 1 ? "" : replicas + " replicas (GPUs 0-" + (replicas - 1) + ") of ")
                + parallel + " parallel sequences of up to " + served.maxContext() + " tokens"
                + (!draft.on() ? "" : ", drafting up to " + draft.draftMax + " tokens with " + (draft.mtp() ? "the MTP head" : draft.draft))
                + (apiKey == null ? "" : ", API key required") + (stateDir == null ? "" : ", state files in " + stateDir));
        err.flush();
        stopped.await();
        return 0;
    }

    /** {@code --replicas}: what it needs and what it does not combine with, said before anything loads. */
    void checkReplicas() {
        if (replicas < 1) throw new IllegalArgumentException("--replicas must be >= 1, got " + replicas);
        if (replicas == 1) return;
        if (device.gpus != 1)
            throw new IllegalArgumentException("--replicas and --gpus do not combine: --gpus splits one copy of the model over"
                    + " several GPUs, --replicas puts a whole copy on each GPU (choose one)");
        if (device.split != null) throw new IllegalArgumentException("--split is taken with --gpus by run and bench only");
        if (DeviceChoice.parse(device.device) != DeviceChoice.CUDA)
            throw new IllegalArgumentException("--replicas " + replicas + " needs --device cuda (one copy of the model per NVIDIA GPU;"
                    + " on the CPU the copies would share the same cores: raise --parallel instead)");
        if (stateDir != null)
            throw new IllegalArgumentException("--state-dir does not combine with --replicas: each replica keeps its own prompt cache");
    }

    /** The first --replicas GPUs, one backend each; their notes on {@code err}. */
    private List<CudaBackend> openReplicas(PrintWriter err) {
        List<CudaBackend> gpus = CudaBackend.replicas(replicas);
        for (Backend b : gpus) for (String note : b.takeNotes()) err.println("cmf: " + note);
        return gpus;
    }

    /** Held so the level set on it stays (java.util.logging keeps loggers weakly). */
    private static final java.util.logging.Logger HELIDON_LOG = java.util.logging.Logger.getLogger("io.helidon");

    private static String readKey(Path f) throws java.io.IOException {
        if (!Files.isRegularFile(f)) throw new IllegalArgumentException("--api-key-file: " + f + " is not a file");
        String k = Files.readAllLines(f).stream().findFirst().orElse("").strip();
        if (k.isEmpty()) throw new IllegalArgumentException("--api-key-file: " + f + " has no key on its first line");
        return k;
    }
}
