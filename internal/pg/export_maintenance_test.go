package pg

// FenceLeadershipSQL is the fence of every maintenance batch, for the test
// that holds a batch open while another process tries to take the row:
// $1 name, $2 holder, $3 token, $4 the extension in microseconds.
const FenceLeadershipSQL = fenceLeadershipSQL

// MaintenanceSettingsSQL sets a batch's statement timeout ($1) and the
// planner's defaults for its transaction.
const MaintenanceSettingsSQL = maintenanceSettingsSQL
