//! The benchmark engine: parameters, connection, run loop, measurement and report.
