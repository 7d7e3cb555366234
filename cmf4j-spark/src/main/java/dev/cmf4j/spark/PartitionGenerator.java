package dev.cmf4j.spark;

import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.InferenceException;
import dev.cmf4j.api.Reply;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

import java.util.ArrayDeque;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One partition through the executor's model: up to {@link GenerateSettings#window()} rows generate at once, each on a
 * virtual thread blocked in the model's scheduler, which decodes them (and the other tasks' rows) together in each
 * step. Rows come out in their input order with the generation's columns appended; a row whose generation ended is
 * replaced at once by the next input row, so a long reply at the head does not shrink the batch.
 */
final class PartitionGenerator implements MapPartitionsFunction<Row, Row> {
    /** How the input column's value is read. */
    enum Input { TEXT, MESSAGES }

    private final GenerateSettings settings;
    private final int column;
    private final Input input;
    private final boolean withIds;

    PartitionGenerator(GenerateSettings settings, int column, Input input, boolean withIds) {
        this.settings = settings;
        this.column = column;
        this.input = input;
        this.withIds = withIds;
    }

    @Override public Iterator<Row> call(Iterator<Row> rows) {
        return new Window(ExecutorModels.get(settings), rows);
    }

    /** The generation's columns: text, finish reason, prompt and completion token counts (and ids); nulls for a null input. */
    Object[] columns(Reply r) {
        if (r == null) return new Object[withIds ? 5 : 4];
        String finish = r.finish().name().toLowerCase(java.util.Locale.ROOT);
        return withIds ? new Object[] {r.text(), finish, r.promptTokens(), r.tokens().length, scala.jdk.javaapi.CollectionConverters.asScala(java.util.Arrays.stream(r.tokens()).boxed().toList())}
                : new Object[] {r.text(), finish, r.promptTokens(), r.tokens().length};
    }

    private record Pending(Row row, long index, CompletableFuture<Reply> reply) {}

    private final class Window implements Iterator<Row> {
        private final CmfModel model;
        private final Iterator<Row> in;
        private final ArrayDeque<Pending> pending = new ArrayDeque<>();
        private final ExecutorService threads = Executors.newVirtualThreadPerTaskExecutor();
        private final AtomicInteger running = new AtomicInteger();
        private final Semaphore ended = new Semaphore(0);   // a permit per finished generation: wakes the task thread
        private long submitted;

        Window(CmfModel model, Iterator<Row> in) {
            this.model = model;
            this.in = in;
            TaskContext task = TaskContext.get();
            // a killed or failed task interrupts its rows' threads, which cancels their generations in the scheduler
            if (task != null) task.addTaskCompletionListener((org.apache.spark.util.TaskCompletionListener) ctx -> threads.shutdownNow());
        }

        @Override public boolean hasNext() {
            refill();
            if (pending.isEmpty()) threads.shutdown();
            return !pending.isEmpty();
        }

        @Override public Row next() {
            if (!hasNext()) throw new NoSuchElementException();
            Pending head = pending.peekFirst();
            try {
                while (!head.reply().isDone()) {
                    ended.acquire();
                    refill();
                }
                pending.pollFirst();
                Reply r = head.reply().get();
                Object[] extra = columns(r);
                Object[] values = new Object[head.row().length() + extra.length];
                for (int i = 0; i < head.row().length(); i++) values[i] = head.row().get(i);
                System.arraycopy(extra, 0, values, head.row().length(), extra.length);
                return RowFactory.create(values);
            } catch (InterruptedException e) {
                threads.shutdownNow();
                Thread.currentThread().interrupt();
                throw new InferenceException(InferenceException.Kind.CANCELLED, "the task was interrupted", e);
            } catch (ExecutionException e) {
                threads.shutdownNow();
                String what = "row " + head.index() + " of partition " + partition();
                if (e.getCause() instanceof InferenceException ie)
                    throw new InferenceException(ie.kind(), what + ": " + ie.getMessage(), ie);
                throw new IllegalStateException(what + " failed: " + e.getCause(), e.getCause());
            }
        }

        /** Starts rows while fewer than the window run and the finished ones waiting behind the head stay bounded. */
        private void refill() {
            int window = settings.window();
            while (running.get() < window && pending.size() < 4 * window && in.hasNext()) {
                Row row = in.next();
                Prompt p = row.isNullAt(column) ? null
                        : input == Input.TEXT ? Prompt.ofText(row.getString(column)) : Prompt.ofMessages(row.getList(column));
                running.incrementAndGet();
                CompletableFuture<Reply> f = new CompletableFuture<>();
                threads.execute(() -> {
                    try {
                        f.complete(p == null ? null : settings.generate(model, p));
                    } catch (Throwable t) {
                        f.completeExceptionally(t);
                    } finally {   // after the future is done, so the woken task thread sees it done
                        running.decrementAndGet();
                        ended.release();
                    }
                });
                pending.addLast(new Pending(row, submitted++, f));
            }
        }

        private static String partition() {
            TaskContext t = TaskContext.get();
            return t == null ? "?" : String.valueOf(t.partitionId());
        }
    }
}
