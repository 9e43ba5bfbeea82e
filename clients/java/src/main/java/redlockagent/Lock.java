package redlockagent;

import java.time.Duration;
import java.util.Map;
import java.util.OptionalLong;

/**
 * A granted lock, released by {@link #close()} (try-with-resources) or
 * {@link #release()}. Use it only while {@link #remaining()} is positive;
 * {@link #extend(Duration)} moves it. Not renewed by anyone: for a lock the
 * agent renews, see {@link RedlockClient#hold}.
 */
public final class Lock implements AutoCloseable {
    private final RedlockClient client;
    private final String resource;
    private final String token;
    private final OptionalLong fence;
    private final int holdCount;
    private final Mode mode;
    private volatile Duration ttl;
    private volatile long validUntilNanos;
    private volatile boolean released;

    Lock(RedlockClient client, Map<String, Object> answer, long arrivedNanos) {
        this.client = client;
        this.resource = Json.string(answer, "resource");
        this.token = Json.string(answer, "token");
        long f = Json.number(answer, "fence", -1);
        this.fence = f < 0 ? OptionalLong.empty() : OptionalLong.of(f);
        this.holdCount = (int) Json.number(answer, "hold_count", 1);
        this.mode = Mode.granted(Json.string(answer, "mode"));
        this.ttl = Duration.ofMillis(Json.number(answer, "ttl_ms", 0));
        this.validUntilNanos = arrivedNanos + Duration.ofMillis(Json.number(answer, "validity_ms", 0)).toNanos();
    }

    public String resource() {
        return resource;
    }

    /** The only proof of holding the lock; keep it secret. */
    public String token() {
        return token;
    }

    /** The fencing token, when one was asked for: pass it with every write. */
    public OptionalLong fence() {
        return fence;
    }

    /** The releases the lock takes: 1 for a first grant, more after re-entries. */
    public int holdCount() {
        return holdCount;
    }

    /** How the lock is held: {@link Mode#SHARED} for a reader's grant. */
    public Mode mode() {
        return mode;
    }

    public Duration ttl() {
        return ttl;
    }

    /** How long the lock is still safe to use (zero once it is not), on the monotonic clock. */
    public Duration remaining() {
        long left = validUntilNanos - System.nanoTime();
        return left > 0 ? Duration.ofNanos(left) : Duration.ZERO;
    }

    /**
     * A new TTL from now, granted only on a quorum with validity left.
     *
     * @throws RedlockException {@code lost} when it had run out
     */
    public void extend(Duration ttl) {
        long sent = System.nanoTime();
        Extended e = client.extend(resource, token, ttl);
        this.ttl = e.ttl();
        this.validUntilNanos = sent + e.validity().toNanos();
    }

    /**
     * Acquires the lock again, for a nested call that takes it too: the same
     * token, in the same mode, the TTL set again, one more release (close the
     * returned lock).
     */
    public Lock reenter(Duration ttl) {
        return client.reenter(resource, token, ttl, mode);
    }

    /** Releases the lock (once): see {@link RedlockClient#release}. */
    public Released release() {
        released = true;
        return client.release(resource, token);
    }

    /** Releases the lock unless {@link #release()} already did. */
    @Override
    public void close() {
        if (!released) {
            release();
        }
    }
}
