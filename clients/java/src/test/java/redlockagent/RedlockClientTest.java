package redlockagent;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.Test;

/**
 * The client against a real agent on three real redis-server masters
 * ({@code redlock-agent dev}), started once for the class. The agent binary
 * is $REDLOCK_AGENT, or target/debug/redlock-agent of this repository.
 */
class RedlockClientTest {
    static final long DEADLINE_S = 15;

    static Process agent;
    static Path dir;
    static RedlockClient client;
    static RedlockClient admin;

    @BeforeAll
    static void startAgent() throws Exception {
        String bin = System.getenv("REDLOCK_AGENT");
        Path agentBin = bin != null && !bin.isEmpty() ? Path.of(bin) : Path.of("../../target/debug/redlock-agent").toAbsolutePath();
        if (!Files.isExecutable(agentBin)) {
            fail("no agent binary at " + agentBin + ": run `cargo build -p redlock-agent` or set REDLOCK_AGENT");
        }
        dir = Files.createTempDirectory("redlock-java-");
        Path socket = dir.resolve("agent.sock");
        agent = new ProcessBuilder(agentBin.toString(), "dev", "--socket", socket.toString(), "--masters", "3",
                "--metrics", "127.0.0.1:0")
            .redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .redirectError(dir.resolve("agent.log").toFile())
            .start();
        client = new RedlockClient(socket);
        admin = new RedlockClient(dir.resolve("admin.sock"));
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(DEADLINE_S);
        RedlockException last = null;
        while (true) {
            try {
                if (client.available()) {
                    return;
                }
            } catch (RedlockException e) {
                last = e;
            }
            if (System.nanoTime() > end) {
                fail("the agent did not answer with a usable quorum; its log:\n" + Files.readString(dir.resolve("agent.log")), last);
            }
            Thread.sleep(20);
        }
    }

    @AfterAll
    static void stopAgent() throws Exception {
        if (agent != null) {
            agent.destroy();
            if (!agent.waitFor(DEADLINE_S, TimeUnit.SECONDS)) {
                agent.destroyForcibly();
            }
        }
        if (dir != null) {
            try (var paths = Files.walk(dir)) {
                paths.sorted((a, b) -> b.compareTo(a)).forEach(p -> p.toFile().delete());
            } catch (IOException e) {
                // a temp dir left behind is no test failure
            }
        }
    }

    static RedlockException refused(String code, int status, Runnable call) {
        RedlockException e = assertThrows(RedlockException.class, call::run);
        assertEquals(code, e.code(), e.getMessage());
        assertEquals(status, e.status(), e.getMessage());
        return e;
    }

    @Test
    @DisplayName("acquire, extend, release; taken, lost and ttl_out_of_range as codes; a resource with / and : is one segment; fences grow")
    void lockRoundTrip() {
        long firstFence;
        String token;
        try (Lock lock = client.acquire("java/orders:42", new LockOptions().ttl(Duration.ofSeconds(10)).owner("java-test").fence())) {
            assertEquals("java/orders:42", lock.resource());
            assertTrue(lock.fence().isPresent());
            assertTrue(lock.remaining().compareTo(Duration.ZERO) > 0);
            assertTrue(lock.remaining().compareTo(Duration.ofSeconds(10)) <= 0);
            refused(RedlockException.TAKEN, 409, () -> client.acquire("java/orders:42"));
            lock.extend(Duration.ofSeconds(20));
            assertEquals(Duration.ofSeconds(20), lock.ttl());
            firstFence = lock.fence().getAsLong();
            token = lock.token();
        }
        refused(RedlockException.LOST, 409, () -> client.extend("java/orders:42", token, null));
        assertFalse(client.release("java/orders:42", token).released());
        try (Lock next = client.acquire("java/orders:42", new LockOptions().fence())) {
            assertTrue(next.fence().getAsLong() > firstFence);
        }
        refused(RedlockException.TTL_OUT_OF_RANGE, 400, () -> client.acquire("java-r", new LockOptions().ttl(Duration.ofMillis(1))));
    }

    @Test
    @DisplayName("a re-entered lock takes one release per acquire; only the last releases it on the masters")
    void reentry() {
        try (Lock outer = client.acquire("java-reentry", new LockOptions().ttl(Duration.ofSeconds(10)))) {
            try (Lock inner = outer.reenter(Duration.ofSeconds(10))) {
                assertEquals(outer.token(), inner.token());
                assertEquals(2, inner.holdCount());
            }
            refused(RedlockException.TAKEN, 409, () -> client.acquire("java-reentry"));
            Released last = outer.release();
            assertTrue(last.released());
            assertEquals(0, last.holdCount());
            refused(RedlockException.NOT_REENTRANT, 409, () -> outer.reenter(null));
        }
    }

    @Test
    @DisplayName("a hold re-enters a lock with its token; its close lowers the count as a release does")
    void holdReenters() throws Exception {
        Lock lock = client.acquire("java-hold-reentry", new LockOptions().ttl(Duration.ofSeconds(10)));
        assertEquals(1, lock.holdCount());
        Hold hold = client.hold("java-hold-reentry", new HoldOptions().reenter(lock.token()));
        assertEquals(lock.token(), hold.token());
        assertEquals(2, hold.holdCount());
        Released first = lock.release();
        assertFalse(first.released());
        assertEquals(1, first.holdCount());
        refused(RedlockException.TAKEN, 409, () -> client.acquire("java-hold-reentry"));
        hold.close(); // the last: released on the masters
        try (Lock next = client.acquire("java-hold-reentry", new LockOptions().waitFor(Duration.ofSeconds(5)))) {
            assertEquals(1, next.holdCount());
            // A re-entering hold's release is its close: one release, not
            // two, so the first acquire still holds the lock.
            Hold inner = client.hold("java-hold-reentry", new HoldOptions().reenter(next.token()));
            assertTrue(inner.release());
            refused(RedlockException.TAKEN, 409, () -> client.acquire("java-hold-reentry"));
        }
    }

    @Test
    @DisplayName("a hold hears of an operator's force release on the admin socket: the future, the listener and check()")
    void holdLostOnForceRelease() throws Exception {
        CompletableFuture<String> heard = new CompletableFuture<>();
        try (Hold hold = client.hold("java-hold", new HoldOptions().ttl(Duration.ofSeconds(2)).fence().owner("java-test"))) {
            hold.onLost(heard::complete);
            assertTrue(hold.fence().isPresent());
            assertTrue(hold.permit().isEmpty());
            // Renewed past its first TTL.
            assertThrows(TimeoutException.class, () -> hold.lost().get(2500, TimeUnit.MILLISECONDS));
            hold.check();
            assertEquals(3, admin.forceRelease("java-hold"));
            assertEquals("force_released", hold.lost().get(DEADLINE_S, TimeUnit.SECONDS));
            assertEquals("force_released", heard.get(DEADLINE_S, TimeUnit.SECONDS));
            LockLostException e = assertThrows(LockLostException.class, hold::check);
            assertEquals("force_released", e.reason());
            assertEquals(Duration.ZERO, hold.remaining());
        }
    }

    @Test
    @DisplayName("closing a hold releases the lock: a waiter gets it at once; close is not a loss")
    void holdCloseReleases() throws Exception {
        Hold hold = client.hold("java-close", new HoldOptions().ttl(Duration.ofSeconds(30)));
        CompletableFuture<Lock> waiter = CompletableFuture.supplyAsync(
            () -> client.acquire("java-close", new LockOptions().ttl(Duration.ofSeconds(5)).waitFor(Duration.ofSeconds(10))));
        Thread.sleep(100); // let the waiter queue; the test holds either way
        long closed = System.nanoTime();
        hold.close();
        try (Lock lock = waiter.get(DEADLINE_S, TimeUnit.SECONDS)) {
            assertTrue(System.nanoTime() - closed < TimeUnit.SECONDS.toNanos(5), "not released at the close");
        }
        assertFalse(hold.isLost());
    }

    @Test
    @DisplayName("two resources under one token refuse a single acquire of either (409 taken); released by the token, both are free")
    void multiLockRoundTrip() {
        String token;
        try (MultiLock lock = client.acquireMany(List.of("java-many-b", "java-many-a"),
                new LockOptions().ttl(Duration.ofSeconds(10)).owner("java-test").fence())) {
            assertEquals(List.of("java-many-a", "java-many-b"), lock.resources());
            assertTrue(lock.fence().isPresent());
            assertTrue(lock.remaining().compareTo(Duration.ZERO) > 0);
            assertTrue(lock.remaining().compareTo(Duration.ofSeconds(10)) <= 0);
            for (String resource : lock.resources()) {
                refused(RedlockException.TAKEN, 409, () -> client.acquire(resource));
            }
            // All or nothing: one taken resource refuses the whole request.
            refused(RedlockException.TAKEN, 409, () -> client.acquireMany(List.of("java-many-a", "java-many-c"), new LockOptions()));
            assertFree("java-many-c");
            lock.extend(Duration.ofSeconds(20));
            assertEquals(Duration.ofSeconds(20), lock.ttl());
            assertTrue(lock.remaining().compareTo(Duration.ofSeconds(10)) > 0);
            token = lock.token();
        }
        assertFree("java-many-a", "java-many-b");
        assertFalse(client.releaseMany(token, List.of("java-many-a", "java-many-b")));
        refused(RedlockException.LOST, 409, () -> client.extendMany(token, null, List.of("java-many-a", "java-many-b")));
    }

    @Test
    @DisplayName("a hold of several resources is renewed, keeps each from a single acquire, and frees them all on close")
    void holdManyCloseReleases() throws Exception {
        Hold hold = client.holdMany(List.of("java-hold-b", "java-hold-a"), new HoldOptions().ttl(Duration.ofMillis(600)).fence());
        assertEquals(List.of("java-hold-a", "java-hold-b"), hold.resources());
        assertEquals("java-hold-a,java-hold-b", hold.resource());
        assertTrue(hold.fence().isPresent());
        // Renewed past its first TTL.
        assertThrows(TimeoutException.class, () -> hold.lost().get(900, TimeUnit.MILLISECONDS));
        for (String resource : hold.resources()) {
            refused(RedlockException.TAKEN, 409, () -> client.acquire(resource));
        }
        hold.close();
        assertFalse(hold.isLost());
        // A TTL far longer than the wait: only the release lets these through.
        assertFree("java-hold-a", "java-hold-b");
        assertThrows(IllegalArgumentException.class,
            () -> client.holdMany(List.of("java-hold-a", "java-hold-b"), new HoldOptions().reenter("a-token")));

        try (Hold forced = client.holdMany(List.of("java-forced-a", "java-forced-b"), new HoldOptions().ttl(Duration.ofSeconds(2)))) {
            admin.forceRelease("java-forced-b");
            assertEquals("force_released", forced.lost().get(DEADLINE_S, TimeUnit.SECONDS));
        }
        assertFree("java-forced-a", "java-forced-b");
    }

    @Test
    @DisplayName("two shared holds are granted at once; once both close, a writer gets the lock")
    void sharedHoldsTogether() throws Exception {
        HoldOptions read = new HoldOptions().ttl(Duration.ofSeconds(10)).mode(Mode.SHARED);
        try (Hold first = client.hold("java-shared", read); Hold second = client.hold("java-shared", read)) {
            assertEquals(Mode.SHARED, first.mode());
            assertEquals(Mode.SHARED, second.mode());
            assertNotEquals(first.token(), second.token());
            assertFalse(first.isLost());
            assertFalse(second.isLost());
        }
        try (Lock writer = client.acquire("java-shared", new LockOptions().ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(5)))) {
            assertEquals(Mode.EXCLUSIVE, writer.mode());
        }
    }

    @Test
    @DisplayName("an exclusive acquire with no wait is taken while a reader holds the lock; the reader re-enters in its mode only")
    void exclusiveTakenWhileShared() {
        Lock reader = client.acquire("java-shared-x", new LockOptions().ttl(Duration.ofSeconds(10)).mode("shared"));
        assertEquals(Mode.SHARED, reader.mode());
        refused(RedlockException.TAKEN, 409, () -> client.acquire("java-shared-x"));
        refused(RedlockException.TAKEN, 409, () -> client.acquire("java-shared-x", new LockOptions().mode(Mode.EXCLUSIVE)));
        refused(RedlockException.TAKEN, 409, () -> client.hold("java-shared-x", new HoldOptions()));
        try (Lock again = reader.reenter(Duration.ofSeconds(10))) {
            assertEquals(reader.token(), again.token());
            assertEquals(2, again.holdCount());
            assertEquals(Mode.SHARED, again.mode());
            refused(RedlockException.NOT_REENTRANT, 409, () -> client.reenter("java-shared-x", reader.token(), null));
        }
        reader.extend(Duration.ofSeconds(20));
        assertEquals(Duration.ofSeconds(20), reader.ttl());
        assertTrue(reader.release().released());
        assertFree("java-shared-x");
    }

    /** Each resource is granted alone, within a short wait, then released. */
    static void assertFree(String... resources) {
        for (String resource : resources) {
            try (Lock lock = client.acquire(resource, new LockOptions().ttl(Duration.ofSeconds(30)).waitFor(Duration.ofSeconds(5)))) {
                assertEquals(resource, lock.resource());
            }
        }
    }

    @Test
    @DisplayName("k permits are granted, the (k+1)th is taken, then granted after a release; another limit is limit_mismatch")
    void semaphore() throws Exception {
        String name = "java-sem";
        int k = 2;
        Permit[] permits = new Permit[k];
        Set<Integer> seen = new HashSet<>();
        for (int i = 0; i < k; i++) {
            permits[i] = client.acquirePermit(name, k, new LockOptions().ttl(Duration.ofSeconds(10)).owner("java-test"));
            assertTrue(permits[i].permit() >= 0 && permits[i].permit() < k);
            assertTrue(seen.add(permits[i].permit()), "permit granted twice");
        }
        refused(RedlockException.TAKEN, 409, () -> client.acquirePermit(name, k, new LockOptions()));
        refused(RedlockException.LIMIT_MISMATCH, 409, () -> client.acquirePermit(name, k + 1, new LockOptions()));
        refused(RedlockException.INVALID_REQUEST, 400, () -> client.acquirePermit(name, 0, new LockOptions()));

        SemaphoreInfo info = client.semaphore(name);
        assertEquals(k, info.limit());
        assertEquals(k, info.permits().size());
        assertTrue(info.permits().get(0).heldHere());

        CompletableFuture<Permit> waiter = CompletableFuture.supplyAsync(
            () -> client.acquirePermit(name, k, new LockOptions().ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(10))));
        permits[0].extend(Duration.ofSeconds(10));
        assertTrue(permits[0].release());
        try (Permit granted = waiter.get(DEADLINE_S, TimeUnit.SECONDS)) {
            assertEquals(permits[0].permit(), granted.permit());
        }
        // The token alone names a permit.
        assertEquals(Duration.ofSeconds(10), client.extendPermit(name, permits[1].token(), Duration.ofSeconds(10)).ttl());
        assertTrue(client.releasePermit(name, permits[1].token()));

        try (Hold held = client.holdPermit(name, k, new HoldOptions().ttl(Duration.ofSeconds(2)).fence())) {
            assertTrue(held.permit().isPresent());
            assertTrue(held.fence().isPresent());
            refused(RedlockException.LIMIT_MISMATCH, 409, () -> client.holdPermit(name, 1, new HoldOptions()));
            assertTrue(held.release());
        }
    }

    @Test
    @DisplayName("no leader is empty (404 no_leader); the first campaigner leads with a term; a second waits, then leads with a larger term once the first resigns")
    void election() throws Exception {
        String name = "java-election";
        assertEquals(Optional.empty(), client.leader(name));

        LinkedBlockingQueue<Optional<Leader>> observed = new LinkedBlockingQueue<>();
        try (Leadership first = client.campaign(name, new CampaignOptions().ttl(Duration.ofSeconds(2)).value("10.0.0.1:80").owner("first"));
                Observer observer = client.observe(name, observed::add)) {
            assertTrue(first.term() > 0);
            Leader leader = client.leader(name).orElseThrow();
            assertEquals("10.0.0.1:80", leader.value());
            assertEquals("first", leader.owner());
            assertEquals(first.term(), leader.term());
            Optional<Leader> seen = observed.poll(DEADLINE_S, TimeUnit.SECONDS);
            assertTrue(seen != null && seen.isPresent() && seen.get().term() == first.term(), String.valueOf(seen));

            LinkedBlockingQueue<Optional<Leader>> waiting = new LinkedBlockingQueue<>();
            CompletableFuture<Leadership> second = client.campaignAsync(name,
                new CampaignOptions().ttl(Duration.ofSeconds(2)).value("10.0.0.2:80").onWaiting(waiting::add));
            Optional<Leader> behind = waiting.poll(DEADLINE_S, TimeUnit.SECONDS);
            assertTrue(behind != null, "the second campaigner did not wait");
            behind.ifPresent(l -> assertEquals(first.term(), l.term()));
            // Past the first's TTL: renewed, still one leader.
            assertThrows(TimeoutException.class, () -> second.get(2500, TimeUnit.MILLISECONDS));
            assertFalse(first.isLost());

            long resigned = System.nanoTime();
            first.resign();
            try (Leadership next = second.get(DEADLINE_S, TimeUnit.SECONDS)) {
                assertTrue(System.nanoTime() - resigned < TimeUnit.SECONDS.toNanos(2), "slow to elect");
                assertTrue(next.term() > first.term(), next.term() + " after " + first.term());
                long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(DEADLINE_S);
                while (true) {
                    Optional<Leader> change = observed.poll(end - System.nanoTime(), TimeUnit.NANOSECONDS);
                    assertTrue(change != null, "the observer did not see the second leader");
                    if (change.isPresent() && change.get().term() == next.term()) {
                        assertEquals("10.0.0.2:80", change.get().value());
                        break;
                    }
                }
            }
        }
    }

    @Test
    @DisplayName("a cancelled campaign is withdrawn")
    void campaignCancelled() throws Exception {
        String name = "java-withdrawn";
        try (Leadership first = client.campaign(name, new CampaignOptions())) {
            CompletableFuture<Leadership> second = client.campaignAsync(name, new CampaignOptions());
            Thread.sleep(100);
            second.cancel(true);
            first.resign();
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(DEADLINE_S);
            while (client.leader(name).isPresent()) {
                assertTrue(System.nanoTime() < end, "the cancelled campaigner was elected");
                Thread.sleep(20);
            }
        }
    }

    @Test
    @DisplayName("the JSON reader and writer round-trip the API's objects")
    void json() {
        Map<String, Object> o = Json.parseObject("{\"a\":\"x\\\"\\u00e9\\n\",\"n\":18446744073709551615,\"m\":-3,\"f\":1.5,"
            + "\"t\":true,\"z\":null,\"l\":[1,{\"b\":false}],\"e\":{}}");
        assertEquals("x\"\u00e9\n", o.get("a"));
        assertEquals(new java.math.BigInteger("18446744073709551615"), o.get("n"));
        assertEquals(-3L, o.get("m"));
        assertEquals(1.5, o.get("f"));
        assertEquals(Boolean.TRUE, o.get("t"));
        assertTrue(o.containsKey("z"));
        assertEquals(List.of(1L, Map.of("b", false)), o.get("l"));
        assertEquals(o, Json.parseObject(Json.write(o)));
        assertThrows(IllegalArgumentException.class, () -> Json.parseObject("{\"a\":1"));
        assertThrows(IllegalArgumentException.class, () -> Json.parseObject("[1]"));
        assertEquals("/v1/locks/a%2Fb%3A%20c/acquire", RedlockClient.path("locks", "a/b: c", "acquire"));
        assertNotEquals(Json.write(Map.of("s", "\u0001")), "{\"s\":\"\u0001\"}");
    }
}
