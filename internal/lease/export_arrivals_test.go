package lease

// ArrivalsSQL is the arrivals claim statement (ClaimArrivals), for plan
// tests.
var ArrivalsSQL = arrivalsSQL
