package auditevent

// EnvelopeAnnotation is the audit annotation lib/envelope adds to an event it took out of a
// managed cloud's envelope: "<cloud>/<envelope>", e.g. "gke/logentry". Findings carry it as
// evidence, so that they say where the event came from.
const EnvelopeAnnotation = "auditlens.io/envelope"
