// test_env_switch.cpp — core/env_switch.h: the default when the variable is unset or empty, "0" and "1", a
// clear error naming the variable for anything else, and the process override winning over the variable.
// ctest runs each test in its own process, so setting the variable here touches no other test.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/env_switch.h"

using specpress::EnvSwitch;

TEST(EnvSwitch, DefaultZeroOneAndOverride) {
  unsetenv("SPECPRESS_TEST_SWITCH");
  EXPECT_TRUE(EnvSwitch("SPECPRESS_TEST_SWITCH", true).on());
  EXPECT_FALSE(EnvSwitch("SPECPRESS_TEST_SWITCH", false).on());
  setenv("SPECPRESS_TEST_SWITCH", "", 1);
  EXPECT_TRUE(EnvSwitch("SPECPRESS_TEST_SWITCH", true).on());
  setenv("SPECPRESS_TEST_SWITCH", "0", 1);
  EnvSwitch off("SPECPRESS_TEST_SWITCH", true);
  EXPECT_FALSE(off.on());
  setenv("SPECPRESS_TEST_SWITCH", "1", 1);
  EXPECT_FALSE(off.on()) << "read once";
  EXPECT_TRUE(EnvSwitch("SPECPRESS_TEST_SWITCH", false).on());
  off.set(true);
  EXPECT_TRUE(off.on()) << "the override wins";
  off.set(false);
  EXPECT_FALSE(off.on());
}

TEST(EnvSwitch, BadValueNamesTheVariable) {
  setenv("SPECPRESS_TEST_SWITCH", "yes", 1);
  EnvSwitch s("SPECPRESS_TEST_SWITCH", true);
  try {
    (void)s.on();
    FAIL() << "expected an error";
  } catch (const specpress::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPECPRESS_TEST_SWITCH"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'yes'"), std::string::npos) << e.what();
  }
  s.set(false);
  EXPECT_FALSE(s.on()) << "an override needs no valid variable";
}
