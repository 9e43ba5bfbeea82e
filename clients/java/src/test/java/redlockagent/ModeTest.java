package redlockagent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * A lock's mode checked where it is given, before any request (no agent:
 * a request would fail {@code unreachable}), and the bodies it makes.
 */
class ModeTest {
    static final RedlockClient NOBODY = new RedlockClient(Path.of("/nonexistent/redlock-nobody.sock"));

    @Test
    @DisplayName("a mode other than shared or exclusive is refused where it is given, naming the value")
    void otherModesRefused() {
        for (String name : new String[] {"read", "Shared", "SHARED", "write", " shared", ""}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Mode.of(name));
            assertTrue(e.getMessage().contains("\"" + name + "\""), e.getMessage());
            assertTrue(e.getMessage().contains("\"shared\" or \"exclusive\""), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> new LockOptions().mode(name));
            assertThrows(IllegalArgumentException.class, () -> new HoldOptions().mode(name));
        }
        assertThrows(IllegalArgumentException.class, () -> Mode.of(null));
        assertThrows(IllegalArgumentException.class, () -> new LockOptions().mode((Mode) null));
        assertThrows(IllegalArgumentException.class, () -> new HoldOptions().mode((String) null));
        assertEquals(Mode.SHARED, Mode.of("shared"));
        assertEquals(Mode.EXCLUSIVE, Mode.of("exclusive"));
    }

    @Test
    @DisplayName("shared is sent as mode; exclusive, named or not, is never sent")
    void bodies() {
        assertEquals("shared", new LockOptions().mode(Mode.SHARED).body().get("mode"));
        assertEquals("shared", new HoldOptions().mode("shared").fence().body().get("mode"));
        assertFalse(new LockOptions().body().containsKey("mode"));
        assertFalse(new LockOptions().mode(Mode.SHARED).mode("exclusive").body().containsKey("mode"));
        assertFalse(new HoldOptions().mode(Mode.EXCLUSIVE).body().containsKey("mode"));
        assertEquals(Mode.SHARED, Mode.granted("shared"));
        assertEquals(Mode.EXCLUSIVE, Mode.granted(null));
    }

    @Test
    @DisplayName("a permit and a lock on several resources refuse a shared mode before any request")
    void sharedOnlyForALock() {
        LockOptions shared = new LockOptions().mode(Mode.SHARED);
        HoldOptions sharedHold = new HoldOptions().mode(Mode.SHARED);
        for (Runnable call : List.<Runnable>of(
                () -> NOBODY.acquirePermit("java-mode", 2, shared),
                () -> NOBODY.holdPermit("java-mode", 2, sharedHold),
                () -> NOBODY.acquireMany(List.of("a", "b"), shared),
                () -> NOBODY.holdMany(List.of("a", "b"), sharedHold))) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call::run);
            assertTrue(e.getMessage().endsWith("is exclusive: it has no shared mode"), e.getMessage());
        }
        // A lock's acquire sends it: it reaches the (absent) agent.
        RedlockException e = assertThrows(RedlockException.class, () -> NOBODY.acquire("java-mode", shared));
        assertEquals(RedlockException.UNREACHABLE, e.code());
    }
}
