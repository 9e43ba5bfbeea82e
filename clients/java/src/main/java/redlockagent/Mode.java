package redlockagent;

import java.util.Locale;

/**
 * How a lock is held: by one holder ({@link #EXCLUSIVE}, the default), or
 * by any number of readers at once ({@link #SHARED}).
 */
public enum Mode {
    /** One holder at a time, excluding readers too. */
    EXCLUSIVE,
    /** A reader: any number hold the lock at once, while no exclusive holder is there. */
    SHARED;

    /** Its name on the wire and in messages: {@code exclusive} or {@code shared}. */
    public String wireName() {
        return name().toLowerCase(Locale.ROOT);
    }

    /**
     * The mode named {@code name} on the wire (from a configuration file, a
     * flag): {@code shared} or {@code exclusive}, exactly.
     *
     * @throws IllegalArgumentException for any other name, null included
     */
    public static Mode of(String name) {
        for (Mode m : values()) {
            if (m.wireName().equals(name)) {
                return m;
            }
        }
        throw new IllegalArgumentException("a lock's mode is \"shared\" or \"exclusive\", not "
            + (name == null ? "null" : "\"" + name + "\""));
    }

    /** The mode a grant's answer names: shared when it says so, else exclusive. */
    static Mode granted(String name) {
        return SHARED.wireName().equals(name) ? SHARED : EXCLUSIVE;
    }
}
