package redlockagent;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What every request that takes a lock or a permit shares. The defaults:
 * the agent's TTL, one attempt, no owner label, no fence.
 */
public class LockOptions {
    Duration ttl;
    Duration waitFor;
    String owner;
    boolean fence;

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
        return body;
    }

    long waitMillis() {
        return waitFor == null ? 0 : waitFor.toMillis();
    }
}
