package redlockagent;

import java.time.Duration;
import java.util.Map;

/** A hold's options: those of {@link LockOptions} and the hold's own. */
public class HoldOptions extends LockOptions {
    private Duration maxHold;
    private boolean expireOnDisconnect;
    private String reenter;

    @Override
    public HoldOptions ttl(Duration ttl) {
        super.ttl(ttl);
        return this;
    }

    @Override
    public HoldOptions waitFor(Duration waitFor) {
        super.waitFor(waitFor);
        return this;
    }

    @Override
    public HoldOptions owner(String owner) {
        super.owner(owner);
        return this;
    }

    @Override
    public HoldOptions fence() {
        super.fence();
        return this;
    }

    @Override
    public HoldOptions mode(Mode mode) {
        super.mode(mode);
        return this;
    }

    @Override
    public HoldOptions mode(String mode) {
        super.mode(mode);
        return this;
    }

    /** Ends the hold with a loss ({@code max_hold}) after this long; the agent's {@code lock.max_hold} when not set. */
    public HoldOptions maxHold(Duration maxHold) {
        this.maxHold = maxHold;
        return this;
    }

    /**
     * Leaves the lock to expire by its TTL when the connection ends without a
     * release, instead of releasing it at once (for storage that cannot check
     * a fence: writes a vanished client still had in flight land first).
     */
    public HoldOptions expireOnDisconnect() {
        this.expireOnDisconnect = true;
        return this;
    }

    /** Re-enters a lock this process holds (its token): closing the hold lowers its count as a release does. */
    public HoldOptions reenter(String token) {
        this.reenter = token;
        return this;
    }

    boolean reenters() {
        return reenter != null;
    }

    @Override
    Map<String, Object> body() {
        Map<String, Object> body = super.body();
        if (maxHold != null) {
            body.put("max_hold_ms", maxHold.toMillis());
        }
        if (expireOnDisconnect) {
            body.put("on_disconnect", "expire");
        }
        if (reenter != null) {
            body.put("token", reenter);
        }
        return body;
    }
}
