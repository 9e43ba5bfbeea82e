package redlockagent;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;

/** A campaign's options; the defaults are the agent's. */
public class CampaignOptions {
    private Duration ttl;
    private String owner;
    private String value;
    private Duration maxHold;
    Consumer<Optional<Leader>> onWaiting;

    /** The leadership's TTL: a leader that vanishes is replaced after at most this long. */
    public CampaignOptions ttl(Duration ttl) {
        this.ttl = ttl;
        return this;
    }

    /** A label operators see. */
    public CampaignOptions owner(String owner) {
        this.owner = owner;
        return this;
    }

    /** What the leader publishes to everyone who asks (an address, say; up to 1024 bytes). */
    public CampaignOptions value(String value) {
        this.value = value;
        return this;
    }

    /** Ends the leadership with a loss ({@code max_hold}) after this long. */
    public CampaignOptions maxHold(Duration maxHold) {
        this.maxHold = maxHold;
        return this;
    }

    /**
     * Called on the campaigning thread when the campaign starts to wait and
     * when the leader it waits behind changes (empty: none could be read).
     */
    public CampaignOptions onWaiting(Consumer<Optional<Leader>> onWaiting) {
        this.onWaiting = onWaiting;
        return this;
    }

    Map<String, Object> body() {
        Map<String, Object> body = new LinkedHashMap<>();
        if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        if (owner != null) {
            body.put("owner", owner);
        }
        if (value != null) {
            body.put("value", value);
        }
        if (maxHold != null) {
            body.put("max_hold_ms", maxHold.toMillis());
        }
        return body;
    }
}
