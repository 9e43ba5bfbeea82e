package redlockagent;

import java.time.Duration;
import java.util.Map;
import java.util.OptionalLong;

/**
 * One of a semaphore's permits, released by {@link #close()}
 * (try-with-resources) or {@link #release()}. Use it only while
 * {@link #remaining()} is positive.
 */
public final class Permit implements AutoCloseable {
    private final RedlockClient client;
    private final String semaphore;
    private final int permit;
    private final String token;
    private final OptionalLong fence;
    private volatile Duration ttl;
    private volatile long validUntilNanos;
    private volatile boolean released;

    Permit(RedlockClient client, Map<String, Object> answer, long arrivedNanos) {
        this.client = client;
        this.semaphore = Json.string(answer, "semaphore");
        this.permit = (int) Json.number(answer, "permit", -1);
        this.token = Json.string(answer, "token");
        long f = Json.number(answer, "fence", -1);
        this.fence = f < 0 ? OptionalLong.empty() : OptionalLong.of(f);
        this.ttl = Duration.ofMillis(Json.number(answer, "ttl_ms", 0));
        this.validUntilNanos = arrivedNanos + Duration.ofMillis(Json.number(answer, "validity_ms", 0)).toNanos();
    }

    public String semaphore() {
        return semaphore;
    }

    /** Which permit, 0 to limit - 1. */
    public int permit() {
        return permit;
    }

    public String token() {
        return token;
    }

    public OptionalLong fence() {
        return fence;
    }

    public Duration ttl() {
        return ttl;
    }

    /** How long the permit is still safe to use (zero once it is not). */
    public Duration remaining() {
        long left = validUntilNanos - System.nanoTime();
        return left > 0 ? Duration.ofNanos(left) : Duration.ZERO;
    }

    /** A new TTL from now. @throws RedlockException {@code lost} when it had run out */
    public void extend(Duration ttl) {
        long sent = System.nanoTime();
        Extended e = client.extendPermit(semaphore, permit, token, ttl);
        this.ttl = e.ttl();
        this.validUntilNanos = sent + e.validity().toNanos();
    }

    /** Releases the permit on every master; false when it had run out already. */
    public boolean release() {
        released = true;
        return client.releasePermit(semaphore, permit, token);
    }

    @Override
    public void close() {
        if (!released) {
            release();
        }
    }
}
