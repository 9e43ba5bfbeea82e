package redlockagent;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A semaphore's permits as a quorum of masters hold them (never tokens).
 *
 * @param semaphore its name
 * @param limit its limit while any permit is held; 0 when none is
 * @param permits the held permits, by permit number
 * @param waiters this agent's requests waiting for a permit
 * @param partial some master could not be read: a permit may be missing
 */
public record SemaphoreInfo(String semaphore, int limit, List<PermitInfo> permits, long waiters, boolean partial) {
    /**
     * One held permit.
     *
     * @param permit which permit
     * @param agent the granting agent's name, or null
     * @param owner its owner label, or null
     * @param validityMs time until fewer than a quorum hold it
     * @param heldHere granted through the agent that answered
     */
    public record PermitInfo(int permit, String agent, String owner, long validityMs, boolean heldHere) {
    }

    @SuppressWarnings("unchecked")
    static SemaphoreInfo of(Map<String, Object> o) {
        List<PermitInfo> permits = new ArrayList<>();
        Object list = o.get("permits");
        if (list instanceof List) {
            for (Object item : (List<Object>) list) {
                Map<String, Object> p = (Map<String, Object>) item;
                permits.add(new PermitInfo((int) Json.number(p, "permit", -1), Json.string(p, "agent"),
                    Json.string(p, "owner"), Json.number(p, "validity_ms", 0), Json.bool(p, "held_here")));
            }
        }
        return new SemaphoreInfo(Json.string(o, "semaphore"), (int) Json.number(o, "limit", 0),
            List.copyOf(permits), Json.number(o, "waiters", 0), Json.bool(o, "partial"));
    }
}
