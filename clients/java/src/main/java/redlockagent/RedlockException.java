package redlockagent;

/**
 * A refused call: the agent's error answer ({@code {"error": {"code",
 * "message"}}}) with its HTTP status, or {@link #UNREACHABLE} (status 0)
 * when the agent could not be reached or its answer read. Branch on
 * {@link #code()}.
 */
public class RedlockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** Held by someone else for all of the wait (409). */
    public static final String TAKEN = "taken";
    /** Fewer than a quorum of masters could be used (503); retrying is safe. */
    public static final String NO_QUORUM = "no_quorum";
    /** Not extended on a quorum in time; another may hold it (409). */
    public static final String LOST = "lost";
    public static final String INVALID_REQUEST = "invalid_request";
    public static final String INVALID_RESOURCE = "invalid_resource";
    public static final String TTL_OUT_OF_RANGE = "ttl_out_of_range";
    public static final String FORBIDDEN = "forbidden";
    /** A re-entry with a token that is not this agent's current grant (409). */
    public static final String NOT_REENTRANT = "not_reentrant";
    /** A semaphore asked with another limit than its held permits' (409). */
    public static final String LIMIT_MISMATCH = "limit_mismatch";
    /** Nobody leads the election (404). */
    public static final String NO_LEADER = "no_leader";
    /** Not the agent's: the socket could not be reached or the answer read. */
    public static final String UNREACHABLE = "unreachable";

    private final int status;
    private final String code;

    public RedlockException(int status, String code, String message, Throwable cause) {
        super(status == 0 ? code + ": " + message : status + " " + code + ": " + message, cause);
        this.status = status;
        this.code = code;
    }

    /** The HTTP status; 0 for {@link #UNREACHABLE}. */
    public int status() {
        return status;
    }

    /** The agent's error code ({@link #TAKEN}, ...), or {@link #UNREACHABLE}. */
    public String code() {
        return code;
    }
}
