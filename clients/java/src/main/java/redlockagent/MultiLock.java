package redlockagent;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;

/**
 * A granted lock on several resources, all of them under one token and one
 * fence; released by {@link #close()} (try-with-resources) or
 * {@link #release()}. Use it only while {@link #remaining()} is positive;
 * {@link #extend(Duration)} moves it. For locks the agent renews, see
 * {@link RedlockClient#holdMany}.
 */
public final class MultiLock implements AutoCloseable {
    private final RedlockClient client;
    private final List<String> resources;
    private final String token;
    private final OptionalLong fence;
    private volatile Duration ttl;
    private volatile long validUntilNanos;
    private volatile boolean released;

    MultiLock(RedlockClient client, Map<String, Object> answer, long arrivedNanos) {
        this.client = client;
        List<String> names = new ArrayList<>();
        for (Object name : (List<?>) answer.get("resources")) {
            names.add((String) name);
        }
        this.resources = Collections.unmodifiableList(names);
        this.token = Json.string(answer, "token");
        long f = Json.number(answer, "fence", -1);
        this.fence = f < 0 ? OptionalLong.empty() : OptionalLong.of(f);
        this.ttl = Duration.ofMillis(Json.number(answer, "ttl_ms", 0));
        this.validUntilNanos = arrivedNanos + Duration.ofMillis(Json.number(answer, "validity_ms", 0)).toNanos();
    }

    /** The resources held, sorted. */
    public List<String> resources() {
        return resources;
    }

    /** The only proof of holding them; it extends and releases them all. Keep it secret. */
    public String token() {
        return token;
    }

    /** The fencing token, when one was asked for: one for every resource. */
    public OptionalLong fence() {
        return fence;
    }

    public Duration ttl() {
        return ttl;
    }

    /** How long the resources are still safe to use (zero once they are not), on the monotonic clock. */
    public Duration remaining() {
        long left = validUntilNanos - System.nanoTime();
        return left > 0 ? Duration.ofNanos(left) : Duration.ZERO;
    }

    /**
     * A new TTL from now for all of them, granted only on a quorum with
     * validity left.
     *
     * @throws RedlockException {@code lost} when they had run out
     */
    public void extend(Duration ttl) {
        long sent = System.nanoTime();
        Extended e = client.extendMany(token, ttl);
        this.ttl = e.ttl();
        this.validUntilNanos = sent + e.validity().toNanos();
    }

    /** Releases them all (once); false when they had run out already. */
    public boolean release() {
        released = true;
        return client.releaseMany(token);
    }

    /** Releases them unless {@link #release()} already did. */
    @Override
    public void close() {
        if (!released) {
            release();
        }
    }
}
