package redlockagent;

import java.util.Map;

/**
 * This campaigner leading an election, renewed by the agent while it is
 * open. A {@link Hold}: {@link #lost()} and {@link #onLost} say when to stop
 * acting as leader; {@link #close()} (or {@link #resign()}) steps down at
 * once and the next campaigner is elected.
 */
public final class Leadership extends Hold {
    private final long term;

    Leadership(RedlockClient client, String election, Http http, Map<String, Object> elected, long arrivedNanos) {
        super(client, "elections", election, http, elected, arrivedNanos, Json.number(elected, "term", 0));
        this.term = Json.number(elected, "term", 0);
    }

    /** The election's name. */
    public String election() {
        return resource();
    }

    /** This leadership's fence: larger than every earlier term's. Pass it with every write the leader makes. */
    public long term() {
        return term;
    }

    /** Steps down at once. */
    public void resign() {
        close();
    }

    /** Resigns (a leadership has no token to release with). */
    @Override
    public boolean release() {
        close();
        return true;
    }
}
