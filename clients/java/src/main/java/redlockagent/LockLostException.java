package redlockagent;

/** A held lock, permit or leadership was lost: stop using it. */
public class LockLostException extends RedlockException {
    private static final long serialVersionUID = 1L;

    private final String reason;

    public LockLostException(String resource, String reason) {
        super(0, LOST, "the lock on " + resource + " was lost: " + reason, null);
        this.reason = reason;
    }

    /** See {@link Hold#lost()}. */
    public String reason() {
        return reason;
    }
}
