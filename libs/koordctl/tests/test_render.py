import pytest
from koordctl.render import method_cell


@pytest.mark.parametrize(("method", "cell"), [
    (None, "-"),
    ({"used": "vpa", "configured": "vpa"}, "vpa"),
    ({"used": "autopilot-ml-units", "configured": "autopilot-ml-units"}, "autopilot-ml-units"),
    # set to the ensemble, which has no samples of its own yet: VPA's target stands
    ({"used": "vpa", "configured": "autopilot-ml-units"}, "vpa (set: autopilot-ml-units, no samples of its own yet)"),
])
def test_the_method_cell_says_which_method_gave_the_target(method, cell):
    assert method_cell(method) == cell
