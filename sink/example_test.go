package sink_test

import (
	"fmt"
	"log"

	"github.com/outbox-relay/outbox-relay/contract"
	"github.com/outbox-relay/outbox-relay/decode"
	"github.com/outbox-relay/outbox-relay/sink"
)

// A Template renders each event's subject from its row. Every placeholder
// fills exactly one token: a value with '.', '*', '>', whitespace or other
// unsafe bytes is percent-encoded, so a row can never change the subject's
// shape or reach a subject outside the stream's filter.
func ExampleTemplate() {
	tpl, err := sink.ParseTemplate(contract.DefaultSubject) // outbox.{aggregate_type}.{event_type}
	if err != nil {
		log.Fatal(err)
	}
	ev := &decode.Event{ID: "7f1c", AggregateType: "order", AggregateID: "42", EventType: "order.created"}
	fmt.Println(tpl.Render(ev))
	ev.AggregateType, ev.EventType = "billing >EU", "*"
	fmt.Println(tpl.Render(ev))
	fmt.Println(tpl.Filter())
	// Output:
	// outbox.order.order%2Ecreated
	// outbox.billing%20%3EEU.%2A
	// outbox.*.*
}
