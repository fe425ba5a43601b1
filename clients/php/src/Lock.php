<?php

namespace Gradus;

/**
 * A named lock held in Gradus (LOCK / UNLOCK), for cron jobs and ad-hoc critical sections.
 *
 * Waiting is server-side and FIFO (no polling). The lock is released by release(), when the
 * connection closes (the process died), or when its lease runs out (the process hung).
 *
 *     $lock = new Gradus\Lock($redis, 'cron:send-mail', 600000);   // lease: 10 minutes
 *     if ($lock->acquire(5000)) {                                  // wait up to 5 s
 *         try { ... } finally { $lock->release(); }
 *     }
 *
 * Or: Gradus\Lock::synchronized($redis, 'cron:send-mail', fn() => ..., 5000, 600000);
 */
final class Lock
{
    private \Redis $redis;
    private string $name;
    private int $leaseMs;
    private ?int $maxWaiters;
    private ?int $token = null;

    /**
     * @param string $name the lock's name (locks do not collide with keys)
     * @param int $leaseMs ms after which Gradus takes the lock back from a hung holder (0: never)
     * @param int|null $maxWaiters callers that may wait at once; the next gets a GradusException (LOCKBUSY)
     */
    public function __construct(\Redis $redis, string $name, int $leaseMs = 60000, ?int $maxWaiters = null)
    {
        $this->redis = $redis;
        $this->name = $name;
        $this->leaseMs = max(0, $leaseMs);
        $this->maxWaiters = $maxWaiters;
    }

    /**
     * Take the lock, waiting up to $waitMs (0: try once). True when held, false when the wait ran out.
     *
     * @throws GradusException when Gradus is unreachable, too many callers wait, or the lock is already held here
     */
    public function acquire(int $waitMs = 0): bool
    {
        if ($this->token !== null) {
            throw new GradusException("Gradus: lock '{$this->name}' is already held by this object");
        }
        $args = ['LOCK', $this->name, 'WAIT', max(0, $waitMs), 'LEASE', $this->leaseMs];
        if ($this->maxWaiters !== null) {
            array_push($args, 'MAXWAITERS', $this->maxWaiters);
        }
        $previous = $this->redis->getOption(\Redis::OPT_READ_TIMEOUT);
        $needed = $waitMs / 1000 + 5;
        $raise = is_numeric($previous) && $previous > 0 && $previous < $needed;
        try {
            if ($raise) {
                $this->redis->setOption(\Redis::OPT_READ_TIMEOUT, $needed);
            }
            $reply = $this->redis->rawCommand(...$args);
        } catch (\RedisException $e) {
            throw new GradusException("Gradus: LOCK {$this->name}: " . $e->getMessage(), 0, $e);
        } finally {
            if ($raise) {
                $this->redis->setOption(\Redis::OPT_READ_TIMEOUT, $previous);
            }
        }
        if (is_int($reply)) {
            $this->token = $reply;
            return true;
        }
        return false;
    }

    /**
     * Release the lock. True if it was released now; false if this object held nothing or the
     * lock had already gone (its lease ran out, or the connection dropped).
     */
    public function release(): bool
    {
        if ($this->token === null) {
            return false;
        }
        $token = $this->token;
        $this->token = null;
        try {
            $this->redis->rawCommand('UNLOCK', $this->name, $token);
            return true;
        } catch (\RedisException $e) {
            // NOLOCK / WRONGTOKEN: the lease ran out; a dropped connection released it too.
            return false;
        }
    }

    /** The fencing token while held (increases with every grant: pass it to what the lock protects). */
    public function token(): ?int
    {
        return $this->token;
    }

    public function name(): string
    {
        return $this->name;
    }

    /**
     * Run $work while holding the lock; GradusException if it could not be had within $waitMs.
     *
     * @template T
     * @param callable(): T $work
     * @return T
     */
    public static function synchronized(
        \Redis $redis,
        string $name,
        callable $work,
        int $waitMs = 0,
        int $leaseMs = 60000
    ) {
        $lock = new self($redis, $name, $leaseMs);
        if (!$lock->acquire($waitMs)) {
            throw new GradusException("Gradus: lock '$name' stayed held for $waitMs ms");
        }
        try {
            return $work();
        } finally {
            $lock->release();
        }
    }
}
