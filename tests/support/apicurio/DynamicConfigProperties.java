package aiokprod.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.ArrayList;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/** What the config-index build step (not on Maven Central) would produce: no dynamic properties. */
@ApplicationScoped
public class DynamicConfigProperties {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList properties() {
        return new DynamicConfigPropertyList(new ArrayList<>());
    }
}
