package events

import (
	"testing"
	"time"
)

// Zero and negative values take the defaults, set values stay, and
// WithDefaults is idempotent.
func TestRequestConsumerOptionsWithDefaults(t *testing.T) {
	cases := []struct {
		name string
		in   RequestConsumerOptions
		want RequestConsumerOptions
	}{
		{"zero", RequestConsumerOptions{}, RequestConsumerOptions{
			Durable: DefaultRequestDurable, Concurrency: DefaultRequestConcurrency, AckWait: DefaultRequestAckWait,
			HandlerTimeout: DefaultRequestHandlerTimeout, RetryDelay: DefaultRequestRetryDelay,
			MaxRetryDelay: DefaultRequestMaxRetryDelay, MaxDeliveries: DefaultRequestMaxDeliveries,
			SetupRetry: DefaultRequestSetupRetry}},
		{"negative", RequestConsumerOptions{Concurrency: -1, AckWait: -time.Second, MaxDeliveries: -3}, RequestConsumerOptions{
			Durable: DefaultRequestDurable, Concurrency: DefaultRequestConcurrency, AckWait: DefaultRequestAckWait,
			HandlerTimeout: DefaultRequestHandlerTimeout, RetryDelay: DefaultRequestRetryDelay,
			MaxRetryDelay: DefaultRequestMaxRetryDelay, MaxDeliveries: DefaultRequestMaxDeliveries,
			SetupRetry: DefaultRequestSetupRetry}},
		{"set, and a retry ceiling below the first delay is raised", RequestConsumerOptions{Durable: "d", Concurrency: 3,
			AckWait: time.Minute, HandlerTimeout: time.Second, RetryDelay: 5 * time.Minute, MaxRetryDelay: time.Minute,
			MaxDeliveries: 2, SetupRetry: time.Millisecond}, RequestConsumerOptions{Durable: "d", Concurrency: 3,
			AckWait: time.Minute, HandlerTimeout: time.Second, RetryDelay: 5 * time.Minute, MaxRetryDelay: 5 * time.Minute,
			MaxDeliveries: 2, SetupRetry: time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.in.WithDefaults()
			if got != c.want {
				t.Errorf("WithDefaults() = %+v, want %+v", got, c.want)
			}
			if again := got.WithDefaults(); again != got {
				t.Errorf("not idempotent: %+v", again)
			}
		})
	}
	if got := (RequestsLimits{MaxBytes: -1}).WithDefaults(); got.MaxBytes != DefaultRequestsMaxBytes || got.MaxPerPrincipal != DefaultRequestsMaxPerPrincipal {
		t.Errorf("RequestsLimits defaults %+v", got)
	}
	if got := (Options{ReconnectWait: -1}).WithDefaults(); got.ReconnectWait != DefaultReconnectWait || got.Timeout != DefaultConnectTimeout {
		t.Errorf("Options defaults %+v", got)
	}
}
