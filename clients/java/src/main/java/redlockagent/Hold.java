package redlockagent;

import java.io.IOException;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A lock (a semaphore's permit, or a lock on several resources) the agent
 * renews every third of its TTL for as long as the hold is open; {@link #close()} (try-with-resources)
 * ends it and the agent releases the lock on every master.
 *
 * <h2>Behavior</h2>
 * <ul>
 * <li>{@link #lost()} completes with the reason when the lock is lost: the
 *     agent's ({@code renew_failed}, {@code no_quorum}, {@code max_hold},
 *     {@code shutdown}, {@code force_released}, {@code node_lost}),
 *     {@code expired} (no renewal came by a twentieth of the last validity
 *     before its end: the agent or its host is frozen) or
 *     {@code disconnected} (the stream ended without a notice).</li>
 * <li>Listeners ({@link #onLost}) run once, on the hold's reader thread or
 *     the client's timer thread: keep them short.</li>
 * <li>{@link #close()} is not a loss: {@link #lost()} does not complete.</li>
 * </ul>
 */
public class Hold implements AutoCloseable {
    private final RedlockClient client;
    private final String kind;
    private final String resource;
    private final Http http;
    private final String token;
    private final Duration ttl;
    private final OptionalLong fence;
    private final OptionalInt permit;
    private final int holdCount;
    private final Mode mode;
    private final List<String> resources;
    private final CompletableFuture<String> lost = new CompletableFuture<>();
    private final Object lock = new Object();
    private long validUntilNanos;
    private ScheduledFuture<?> watchdog;
    private boolean closed;

    Hold(RedlockClient client, String kind, String resource, Http http, Map<String, Object> first,
            long arrivedNanos, long fence) {
        this(client, kind, resource, http, first, arrivedNanos, fence, List.of(), Mode.EXCLUSIVE);
    }

    /** {@code mode}: the one asked for (the {@code acquired} event does not say). */
    Hold(RedlockClient client, String kind, String resource, Http http, Map<String, Object> first,
            long arrivedNanos, long fence, List<String> resources, Mode mode) {
        this.client = client;
        this.mode = mode;
        this.resources = Collections.unmodifiableList(resources);
        this.kind = kind;
        this.resource = resource;
        this.http = http;
        this.token = Json.string(first, "token");
        this.ttl = Duration.ofMillis(Json.number(first, "ttl_ms", 0));
        this.fence = fence < 0 ? OptionalLong.empty() : OptionalLong.of(fence);
        long p = Json.number(first, "permit", -1);
        this.permit = p < 0 ? OptionalInt.empty() : OptionalInt.of((int) p);
        this.holdCount = (int) Json.number(first, "hold_count", 1);
        renewed(arrivedNanos, Json.number(first, "validity_ms", 0));
        Thread reader = new Thread(this::read, "redlock-hold " + resource);
        reader.setDaemon(true);
        reader.start();
    }

    /**
     * The lock's resource (the semaphore's or the election's name; the
     * resources joined by commas for a lock on several).
     */
    public String resource() {
        return resource;
    }

    /** The resources of a hold of several ({@link RedlockClient#holdMany}), sorted; empty otherwise. */
    public List<String> resources() {
        return resources;
    }

    /** The grant's token (null for a leadership). */
    public String token() {
        return token;
    }

    public Duration ttl() {
        return ttl;
    }

    /** The fencing token, when one was asked for (a leadership's term). */
    public OptionalLong fence() {
        return fence;
    }

    /** Which permit a semaphore's hold has; empty for a lock. */
    public OptionalInt permit() {
        return permit;
    }

    /**
     * How the lock is held: {@link Mode#SHARED} for a reader's hold;
     * exclusive otherwise (permits and locks on several too).
     */
    public Mode mode() {
        return mode;
    }

    /** The acquires a re-entering hold's close undoes, its own included; 1 otherwise. */
    public int holdCount() {
        return holdCount;
    }

    /** How long the lock is safe to use unless renewed (zero once lost or past it). */
    public Duration remaining() {
        synchronized (lock) {
            long left = validUntilNanos - System.nanoTime();
            return left > 0 && !lost.isDone() ? Duration.ofNanos(left) : Duration.ZERO;
        }
    }

    /** Completes with the reason when the lock is lost (see the class's Behavior). */
    public CompletableFuture<String> lost() {
        return lost.copy();
    }

    /** Calls {@code listener} with the reason once the lock is lost (at once if it is). */
    public Hold onLost(Consumer<String> listener) {
        lost.thenAccept(listener);
        return this;
    }

    public boolean isLost() {
        return lost.isDone();
    }

    /** Throws once the lock is lost: call it between steps of the work. */
    public void check() throws LockLostException {
        if (lost.isDone()) {
            throw new LockLostException(resource, lost.getNow("lost"));
        }
    }

    /**
     * Releases through the API, then closes the hold: true when a quorum
     * still held the lock. A hold that re-entered a lock (its
     * {@link #holdCount()} above 1) is only closed: its close is its
     * release, which lowers the count once (a release through the API as
     * well would lower it twice, and release the lock its first acquire
     * still holds); true unless it was lost.
     */
    public boolean release() {
        if (holdCount > 1) {
            boolean held = !isLost();
            close();
            return held;
        }
        try {
            if ("semaphores".equals(kind)) {
                return client.releasePermit(resource, token);
            }
            if ("multi".equals(kind)) {
                return client.releaseMany(token);
            }
            return client.release(resource, token).released();
        } finally {
            close();
        }
    }

    /** Ends the hold: the connection closes and the agent releases the lock on every master. */
    @Override
    public void close() {
        synchronized (lock) {
            closed = true;
            if (watchdog != null) {
                watchdog.cancel(false);
            }
        }
        http.close();
    }

    private void renewed(long arrivedNanos, long validityMs) {
        long validity = TimeUnit.MILLISECONDS.toNanos(validityMs);
        synchronized (lock) {
            if (closed) {
                return;
            }
            validUntilNanos = arrivedNanos + validity;
            if (watchdog != null) {
                watchdog.cancel(false);
            }
            long wait = validUntilNanos - validity / 20 - System.nanoTime();
            watchdog = Http.TIMER.schedule(() -> markLost("expired"), Math.max(wait, 0), TimeUnit.NANOSECONDS);
        }
    }

    private void markLost(String reason) {
        synchronized (lock) {
            if (closed || lost.isDone()) {
                return;
            }
            closed = true;
            if (watchdog != null) {
                watchdog.cancel(false);
            }
        }
        http.close();
        lost.complete(reason);
    }

    private void read() {
        try {
            for (String line = http.readLine(); line != null; line = http.readLine()) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> event = Json.parseObject(line);
                String name = Json.string(event, "event");
                if ("renewed".equals(name)) {
                    renewed(System.nanoTime(), Json.number(event, "validity_ms", 0));
                } else if ("lost".equals(name)) {
                    markLost(String.valueOf(Json.string(event, "reason")));
                    return;
                }
            }
            markLost("disconnected");
        } catch (IOException | IllegalArgumentException e) {
            // After close() this is the close we caused, and markLost ignores it.
            markLost("disconnected (" + e + ")");
        }
    }
}
