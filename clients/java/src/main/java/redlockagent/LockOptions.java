package redlockagent;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What every request that takes a lock or a permit shares. The defaults:
 * the agent's TTL, one attempt, no owner label, no fence, exclusive.
 */
public class LockOptions {
    Duration ttl;
    Duration waitFor;
    String owner;
    boolean fence;
    Mode mode = Mode.EXCLUSIVE;

    /** The lock's TTL; the agent's {@code lock.default_ttl} when not set. */
    public LockOptions ttl(Duration ttl) {
        this.ttl = ttl;
        return this;
    }

    /** How long the agent may keep trying while the lock is taken (in FIFO order). */
    public LockOptions waitFor(Duration waitFor) {
        this.waitFor = waitFor;
        return this;
    }

    /** A label operators see beside the lock. */
    public LockOptions owner(String owner) {
        this.owner = owner;
        return this;
    }

    /** Asks for a fencing token: larger than every earlier grant's on these masters. */
    public LockOptions fence() {
        this.fence = true;
        return this;
    }

    /**
     * How a lock is held: {@link Mode#SHARED} takes it as a reader, beside
     * any other readers; {@link Mode#EXCLUSIVE} (the default) as its one
     * holder. Only a lock's acquire and hold take it: a permit and a lock on
     * several resources are exclusive, and their calls refuse a shared mode.
     *
     * @throws IllegalArgumentException for null
     */
    public LockOptions mode(Mode mode) {
        if (mode == null) {
            throw new IllegalArgumentException("a lock's mode is SHARED or EXCLUSIVE, not null");
        }
        this.mode = mode;
        return this;
    }

    /**
     * {@link #mode(Mode)} by its name on the wire, {@code shared} or
     * {@code exclusive} (as a configuration file gives it).
     *
     * @throws IllegalArgumentException for any other name
     */
    public LockOptions mode(String mode) {
        return mode(Mode.of(mode));
    }

    /** Refuses a shared mode for what has none ({@code what}: "a permit", ...). */
    void exclusive(String what) {
        if (mode != Mode.EXCLUSIVE) {
            throw new IllegalArgumentException(what + " is exclusive: it has no " + mode.wireName() + " mode");
        }
    }

    Map<String, Object> body() {
        Map<String, Object> body = new LinkedHashMap<>();
        if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        if (waitFor != null) {
            body.put("wait_ms", waitFor.toMillis());
        }
        if (owner != null) {
            body.put("owner", owner);
        }
        if (fence) {
            body.put("fence", true);
        }
        if (mode != Mode.EXCLUSIVE) {
            body.put("mode", mode.wireName()); // exclusive, the default, is never sent
        }
        return body;
    }

    long waitMillis() {
        return waitFor == null ? 0 : waitFor.toMillis();
    }
}
