package kit

import engine "github.com/latchkit/latchkit/internal/kit"

// Option configures a primitive written on this package (NewSite): the
// values package primitives' With functions return for its locks,
// semaphores and elections (primitives.WithTTL, WithAutoExtend,
// WithMiddleware, WithRetry, WithWaiterTimeout, WithRetention,
// WithReplicaAck, WithLogger, WithHeldWarning, WithPrefix), so that a
// program configures its own primitives and the built-ins with the same
// values. Only those functions make one.
type Option = engine.Option
