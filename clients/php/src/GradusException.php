<?php

namespace Gradus;

/**
 * Gradus could not do what a session or lock call needed: the server is unreachable, the lock
 * wait ran out, too many requests already wait for the same session (LOCKBUSY), or the lease
 * ran out before the write (WRONGTOKEN). The message says which.
 */
class GradusException extends \RuntimeException
{
}
