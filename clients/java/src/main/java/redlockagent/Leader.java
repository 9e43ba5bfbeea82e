package redlockagent;

import java.util.Map;

/**
 * An election's leader as the agent tells it.
 *
 * @param election the election's name
 * @param agent {@code agent.name} of the agent the leader campaigns through, or null
 * @param owner the leader's owner label, or null
 * @param value what the leader publishes (an address, say), or null
 * @param term the leadership's fence, larger than every earlier term's; 0 when the leader's note could not be read
 * @param sinceMs when it was elected, ms since the Unix epoch by its agent's clock; 0 when unknown
 * @param validityMs time until the leadership ends unless it is renewed
 */
public record Leader(String election, String agent, String owner, String value, long term, long sinceMs, long validityMs) {
    static Leader of(Map<String, Object> o) {
        return new Leader(
            Json.string(o, "election"),
            Json.string(o, "agent"),
            Json.string(o, "owner"),
            Json.string(o, "value"),
            Json.number(o, "term", 0),
            Json.number(o, "since_ms", 0),
            Json.number(o, "validity_ms", 0));
    }
}
